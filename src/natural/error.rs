//! The ways a client's request body can be unusable for natural mode.
//!
//! Every variant is the client's fault, so the gateway answers each with HTTP
//! 400 in the OpenAI error shape; `param` points at the offending field the way
//! OpenAI does (`tools[2].function.name`), so client authors can find it.

use std::fmt;

/// Why a request body could not be rewritten for natural mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The body is not valid JSON.
    InvalidJson {
        /// The parser's description of the problem.
        message: String,
    },
    /// The body is valid JSON but not an object.
    NotAnObject,
    /// A required field is absent.
    Missing {
        /// Where the field should be.
        param: String,
    },
    /// A field has the wrong JSON type.
    WrongType {
        /// The offending field.
        param: String,
        /// What was expected, phrased for the message ("an array").
        expected: &'static str,
    },
    /// A field has the right type but a value that cannot be used.
    InvalidValue {
        /// The offending field.
        param: String,
        /// What is wrong with it.
        message: String,
    },
    /// Two declared tools share a name, so a call could not be attributed.
    DuplicateTool {
        /// The second declaration of the name.
        param: String,
        /// The repeated name.
        name: String,
    },
    /// The contracts rendered for the declared tools would exceed the size
    /// limit of the system block; `name` is the tool that crossed it.
    ContractTooLarge {
        /// The tool whose contract crossed the limit.
        name: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The grammar of constrained calls (`constrain = "gbnf"`) for the
    /// declared tools would cross its budget; `name` is the tool that did.
    GrammarTooLarge {
        /// The tool whose schema crossed the budget.
        name: String,
        /// The limit crossed, phrased for the message ("65536 rules").
        limit: String,
    },
    /// `tool_choice` (or `function_call`) names a tool that was not declared.
    UndeclaredTool {
        /// The field holding the name.
        param: String,
        /// The unknown name.
        name: String,
    },
}

impl RequestError {
    /// The HTTP status the gateway should answer with.
    pub fn status(&self) -> u16 {
        400
    }

    /// The OpenAI error `type` for this error.
    pub fn error_type(&self) -> &'static str {
        "invalid_request_error"
    }

    /// The offending request field, as OpenAI reports it in `error.param`.
    pub fn param(&self) -> Option<&str> {
        match self {
            RequestError::InvalidJson { .. } | RequestError::NotAnObject => None,
            RequestError::ContractTooLarge { .. } | RequestError::GrammarTooLarge { .. } => {
                Some("tools")
            }
            RequestError::Missing { param }
            | RequestError::WrongType { param, .. }
            | RequestError::InvalidValue { param, .. }
            | RequestError::DuplicateTool { param, .. }
            | RequestError::UndeclaredTool { param, .. } => Some(param),
        }
    }

    pub(crate) fn missing(param: impl Into<String>) -> Self {
        RequestError::Missing {
            param: param.into(),
        }
    }

    pub(crate) fn wrong_type(param: impl Into<String>, expected: &'static str) -> Self {
        RequestError::WrongType {
            param: param.into(),
            expected,
        }
    }

    pub(crate) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        RequestError::InvalidValue {
            param: param.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::InvalidJson { message } => {
                write!(f, "the request body is not valid JSON: {message}")
            }
            RequestError::NotAnObject => f.write_str("the request body must be a JSON object"),
            RequestError::Missing { param } => write!(f, "missing required parameter '{param}'"),
            RequestError::WrongType { param, expected } => {
                write!(f, "'{param}' must be {expected}")
            }
            RequestError::InvalidValue { param, message } => write!(f, "'{param}': {message}"),
            RequestError::DuplicateTool { param, name } => {
                write!(
                    f,
                    "'{param}': the tool name '{name}' is declared more than once"
                )
            }
            RequestError::ContractTooLarge { name, limit } => write!(
                f,
                "'tools': the schema of tool '{name}' makes the tool instructions larger than {limit} bytes; simplify its parameters"
            ),
            RequestError::GrammarTooLarge { name, limit } => write!(
                f,
                "'tools': the schema of tool '{name}' makes the grammar of constrained calls larger than {limit}; simplify its parameters"
            ),
            RequestError::UndeclaredTool { param, name } => {
                write!(f, "'{param}': '{name}' is not one of the declared tools")
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// A request natural mode refused is the client's error.
impl From<RequestError> for crate::error::GatewayError {
    fn from(e: RequestError) -> Self {
        crate::error::GatewayError::BadRequest {
            param: e.param().map(str::to_owned),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_param() {
        let err = RequestError::wrong_type("tools", "an array");
        assert_eq!(err.to_string(), "'tools' must be an array");
        assert_eq!(err.param(), Some("tools"));
        assert_eq!(err.status(), 400);
    }

    #[test]
    fn body_level_errors_have_no_param() {
        assert_eq!(RequestError::NotAnObject.param(), None);
        let err = RequestError::InvalidJson {
            message: "EOF".into(),
        };
        assert_eq!(err.param(), None);
        assert!(err.to_string().contains("EOF"));
    }
}
