//! Which path a routed request takes: a pure function of the door it came
//! through, the provider's shape and whether transcripts are kept.
//!
//! The doors (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`), a
//! provider's `api`, its tool `mode`, its gateway tools and text-call rescue
//! meet here and nowhere else; `gateway::dispatch` only carries the plan out.

use http::Method;

use crate::config::{Api, Mode, Provider};

/// The door a `/v1` request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/messages` (and `/v1/messages/count_tokens`).
    Messages,
    /// Any other `/v1` request (embeddings, `GET`s, …): forwarded as it is.
    Other,
}

impl Door {
    /// The door of a request; a trailing slash is the same door.
    pub fn of(method: &Method, path: &str) -> Door {
        if method != Method::POST {
            return Door::Other;
        }
        if crate::api::messages::is_messages_path(path) {
            return Door::Messages;
        }
        match path.strip_suffix('/').unwrap_or(path) {
            "/v1/chat/completions" => Door::Chat,
            "/v1/responses" => Door::Responses,
            _ => Door::Other,
        }
    }
}

/// What of a provider decides a request's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The API the provider speaks.
    pub api: Api,
    /// Its tool mode.
    pub mode: Mode,
    /// The gateway runs a tool loop for it: `gateway_tools` or `tool_search`.
    pub gateway_tools: bool,
    /// Answers are read for calls written as text (natural mode, or `rescue_text_calls`).
    pub reads_text_calls: bool,
    /// Every target is an HTTP upstream (none is the in-process demo model).
    pub all_http: bool,
}

impl Shape {
    /// A provider's shape.
    pub fn of(provider: &Provider) -> Shape {
        Shape {
            api: provider.api,
            mode: provider.tools.mode,
            gateway_tools: provider.tools.runs_loop(),
            reads_text_calls: provider.tools.reads_text_calls(),
            all_http: provider.all_http(),
        }
    }
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To the provider as it came (its `model` possibly renamed).
    Forward,
    /// Natural mode (or text-call rescue) on a chat request.
    Natural,
    /// to_natural mode on a chat request.
    ToNatural,
    /// The chat door's answer path: gateway tools, or a Responses upstream.
    ChatAnswer,
    /// The Responses door's answer path (translated to the provider's API).
    ResponsesAnswer,
    /// The Messages door's answer path (translated to Chat Completions).
    MessagesAnswer,
    /// An `api = "anthropic"` provider asked through another door.
    AnthropicOnly,
    /// The Messages door to an `api = "responses"` provider.
    MessagesNeedsChat,
}

/// The path of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Where it goes.
    pub route: Route,
    /// The body is parsed somewhere on the way, so it is first checked
    /// against the container limits; a body passed on untouched never is.
    pub scan: bool,
    /// The exchange is recorded by tapping the answer on its way back
    /// (the answer paths record for themselves).
    pub tap: bool,
}

/// Decides a request's path. `store`: transcripts are kept.
pub fn plan(door: Door, shape: &Shape, store: bool) -> Plan {
    let route = route(door, shape);
    let untouched = shape.mode == Mode::Passthrough
        && !shape.gateway_tools
        && !shape.reads_text_calls
        && !store
        && shape.all_http
        && match shape.api {
            Api::Chat => !matches!(door, Door::Responses | Door::Messages),
            Api::Responses => door != Door::Chat,
            Api::Anthropic => true,
        };
    let tap = store
        && door == Door::Chat
        && matches!(route, Route::Forward | Route::Natural | Route::ToNatural);
    Plan {
        route,
        scan: !untouched,
        tap,
    }
}

fn route(door: Door, shape: &Shape) -> Route {
    // A Responses request goes through the answer path unless the provider
    // speaks Responses itself and nothing changes on the way.
    let translated =
        shape.api == Api::Chat || shape.gateway_tools || shape.mode != Mode::Passthrough;
    if shape.api == Api::Anthropic {
        // An `api = "anthropic"` provider gets /v1/messages untouched (config
        // gives it no tool mode and no gateway tools).
        return match door {
            Door::Messages => Route::Forward,
            _ => Route::AnthropicOnly,
        };
    }
    match door {
        Door::Responses if translated => Route::ResponsesAnswer,
        Door::Messages => match shape.api {
            Api::Chat => Route::MessagesAnswer,
            _ => Route::MessagesNeedsChat,
        },
        Door::Chat if shape.gateway_tools || shape.api == Api::Responses => Route::ChatAnswer,
        Door::Chat if shape.reads_text_calls => Route::Natural,
        Door::Chat if shape.mode == Mode::ToNatural => Route::ToNatural,
        _ => Route::Forward,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOORS: [Door; 4] = [Door::Chat, Door::Responses, Door::Messages, Door::Other];

    /// Every shape a provider can have (and some config refuses).
    fn shapes() -> Vec<Shape> {
        let mut all = Vec::new();
        for api in [Api::Chat, Api::Responses, Api::Anthropic] {
            for mode in [Mode::Passthrough, Mode::Natural, Mode::ToNatural] {
                for gateway_tools in [false, true] {
                    for rescue in [false, true] {
                        for all_http in [false, true] {
                            all.push(Shape {
                                api,
                                mode,
                                gateway_tools,
                                reads_text_calls: mode == Mode::Natural || rescue,
                                all_http,
                            });
                        }
                    }
                }
            }
        }
        all
    }

    fn every() -> impl Iterator<Item = (Door, Shape, bool, Plan)> {
        shapes().into_iter().flat_map(|shape| {
            DOORS.into_iter().flat_map(move |door| {
                [false, true].map(move |store| (door, shape, store, plan(door, &shape, store)))
            })
        })
    }

    const PLAIN: Shape = Shape {
        api: Api::Chat,
        mode: Mode::Passthrough,
        gateway_tools: false,
        reads_text_calls: false,
        all_http: true,
    };

    #[test]
    fn doors_are_told_by_method_and_path() {
        assert_eq!(Door::of(&Method::POST, "/v1/chat/completions"), Door::Chat);
        assert_eq!(Door::of(&Method::POST, "/v1/chat/completions/"), Door::Chat);
        assert_eq!(Door::of(&Method::POST, "/v1/responses"), Door::Responses);
        assert_eq!(Door::of(&Method::POST, "/v1/messages"), Door::Messages);
        assert_eq!(
            Door::of(&Method::POST, "/v1/messages/count_tokens"),
            Door::Messages
        );
        assert_eq!(Door::of(&Method::GET, "/v1/chat/completions"), Door::Other);
        assert_eq!(Door::of(&Method::POST, "/v1/embeddings"), Door::Other);
        assert_eq!(Door::of(&Method::POST, "/v1/responses/abc"), Door::Other);
    }

    #[test]
    fn a_plain_chat_provider_is_a_byte_exact_hop() {
        for door in [Door::Chat, Door::Other] {
            let p = plan(door, &PLAIN, false);
            assert_eq!(
                p,
                Plan {
                    route: Route::Forward,
                    scan: false,
                    tap: false
                },
                "{door:?}"
            );
        }
        // The same with a store: parsed for the recorder, the answer tapped.
        let p = plan(Door::Chat, &PLAIN, true);
        assert_eq!((p.route, p.scan, p.tap), (Route::Forward, true, true));
        // Not the other doors' requests: they are translated.
        assert_eq!(
            plan(Door::Responses, &PLAIN, false).route,
            Route::ResponsesAnswer
        );
        assert_eq!(
            plan(Door::Messages, &PLAIN, false).route,
            Route::MessagesAnswer
        );
    }

    #[test]
    fn each_mode_on_the_chat_door() {
        let natural = Shape {
            mode: Mode::Natural,
            reads_text_calls: true,
            ..PLAIN
        };
        assert_eq!(plan(Door::Chat, &natural, false).route, Route::Natural);
        let rescue = Shape {
            reads_text_calls: true,
            ..PLAIN
        };
        assert_eq!(plan(Door::Chat, &rescue, false).route, Route::Natural);
        let to_natural = Shape {
            mode: Mode::ToNatural,
            ..PLAIN
        };
        assert_eq!(plan(Door::Chat, &to_natural, false).route, Route::ToNatural);
        let tools = Shape {
            gateway_tools: true,
            ..natural
        };
        assert_eq!(plan(Door::Chat, &tools, false).route, Route::ChatAnswer);
        let responses = Shape {
            api: Api::Responses,
            ..PLAIN
        };
        assert_eq!(plan(Door::Chat, &responses, false).route, Route::ChatAnswer);
        // A Responses provider asked through its own door, nothing to change:
        // forwarded untouched.
        let p = plan(Door::Responses, &responses, false);
        assert_eq!((p.route, p.scan), (Route::Forward, false));
    }

    #[test]
    fn an_anthropic_provider_takes_the_messages_door_only_and_untouched() {
        let anthropic = Shape {
            api: Api::Anthropic,
            ..PLAIN
        };
        let p = plan(Door::Messages, &anthropic, false);
        assert_eq!((p.route, p.scan), (Route::Forward, false));
        for door in [Door::Chat, Door::Other] {
            assert_eq!(plan(door, &anthropic, false).route, Route::AnthropicOnly);
        }
        let responses = Shape {
            api: Api::Responses,
            ..PLAIN
        };
        assert_eq!(
            plan(Door::Messages, &responses, false).route,
            Route::MessagesNeedsChat
        );
    }

    /// Over every door, shape and store: the rules that keep a request's
    /// meaning on its way.
    #[test]
    fn every_combination_keeps_the_invariants() {
        let mut seen = std::collections::HashSet::new();
        for (door, shape, store, p) in every() {
            let case = format!("{door:?} {shape:?} store={store}: {p:?}");
            seen.insert(format!("{:?}", p.route));
            // A body passed on without a scan is never parsed: no mode, no
            // gateway tools, no recorder, no demo model, no translation (a
            // refusal does not read it either).
            if !p.scan {
                assert!(
                    matches!(
                        p.route,
                        Route::Forward | Route::AnthropicOnly | Route::MessagesNeedsChat
                    ),
                    "{case}"
                );
                assert!(
                    shape.mode == Mode::Passthrough
                        && !shape.gateway_tools
                        && !shape.reads_text_calls
                        && !store
                        && shape.all_http,
                    "{case}"
                );
            }
            // Every answer path parses the body.
            if matches!(
                p.route,
                Route::Natural
                    | Route::ToNatural
                    | Route::ChatAnswer
                    | Route::ResponsesAnswer
                    | Route::MessagesAnswer
            ) {
                assert!(p.scan, "{case}");
            }
            // Only chat requests are tapped, only with a store, only where
            // no answer path records the exchange itself.
            assert_eq!(
                p.tap,
                store
                    && door == Door::Chat
                    && matches!(p.route, Route::Forward | Route::Natural | Route::ToNatural),
                "{case}"
            );
            // Gateway tools are never skipped on a door that can carry them.
            if shape.gateway_tools && shape.api != Api::Anthropic {
                match door {
                    Door::Chat => assert_eq!(p.route, Route::ChatAnswer, "{case}"),
                    Door::Responses => assert_eq!(p.route, Route::ResponsesAnswer, "{case}"),
                    Door::Messages if shape.api == Api::Chat => {
                        assert_eq!(p.route, Route::MessagesAnswer, "{case}");
                    }
                    _ => {}
                }
            }
            // A tool mode is never skipped on a chat request.
            if door == Door::Chat && shape.api == Api::Chat && !shape.gateway_tools {
                let want = if shape.reads_text_calls {
                    Route::Natural
                } else if shape.mode == Mode::ToNatural {
                    Route::ToNatural
                } else {
                    Route::Forward
                };
                assert_eq!(p.route, want, "{case}");
            }
            // An Anthropic provider only ever sees /v1/messages, untouched.
            if shape.api == Api::Anthropic {
                let want = if door == Door::Messages {
                    Route::Forward
                } else {
                    Route::AnthropicOnly
                };
                assert_eq!(p.route, want, "{case}");
            }
            // Requests outside the three doors are never translated.
            if door == Door::Other {
                assert!(
                    matches!(p.route, Route::Forward | Route::AnthropicOnly),
                    "{case}"
                );
            }
        }
        assert_eq!(seen.len(), 8, "every route is reachable: {seen:?}");
    }
}
