//! Rows of chats being answered now, for the events endpoint's viewers. A
//! chat has a channel while an answer or a viewer needs it, no longer. An
//! answer's rows reach the database when it ends, so a viewer who comes
//! mid-answer is first given the rows the answers in flight made so far.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::store::record::Message;

/// Rows a slow viewer may fall behind before it misses some (it is told),
/// and rows of the answers in flight kept for a viewer who comes later.
const CAPACITY: usize = 256;

#[derive(Default)]
pub struct Live {
    chats: Mutex<HashMap<Arc<str>, Channel>>,
}

struct Channel {
    /// Made when the first viewer comes: most chats are never watched, and
    /// a channel allocates its [`CAPACITY`] slots up front.
    tx: Option<broadcast::Sender<Arc<Message>>>,
    /// Answers of this chat in flight.
    answers: usize,
    /// Their rows so far (the newest [`CAPACITY`]).
    recent: VecDeque<Arc<Message>>,
}

impl Channel {
    fn viewers(&self) -> usize {
        self.tx
            .as_ref()
            .map_or(0, broadcast::Sender::receiver_count)
    }

    fn new() -> Channel {
        Channel {
            tx: None,
            answers: 0,
            recent: VecDeque::new(),
        }
    }
}

impl Live {
    /// An answer of `chat` starts.
    pub fn start(&self, chat: &Arc<str>) {
        let mut chats = self
            .chats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sweep(&mut chats);
        chats
            .entry(chat.clone())
            .or_insert_with(Channel::new)
            .answers += 1;
    }

    pub fn publish(&self, chat: &str, message: &Arc<Message>) {
        let mut chats = self
            .chats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(channel) = chats.get_mut(chat) {
            if channel.recent.len() == CAPACITY {
                channel.recent.pop_front();
            }
            channel.recent.push_back(message.clone());
            if let Some(tx) = &channel.tx
                && tx.receiver_count() > 0
            {
                let _ = tx.send(message.clone());
            }
        }
    }

    /// An answer of `chat` ended.
    pub fn finish(&self, chat: &str) {
        let mut chats = self
            .chats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(channel) = chats.get_mut(chat) {
            channel.answers = channel.answers.saturating_sub(1);
            if channel.answers == 0 {
                // Its rows are queued for the database now.
                channel.recent.clear();
                if channel.viewers() == 0 {
                    chats.remove(chat);
                }
            }
        }
    }

    /// A viewer of `chat`, and the rows of its answers in flight so far;
    /// [`Live::unsubscribe`] when it leaves.
    pub fn subscribe(&self, chat: &str) -> (broadcast::Receiver<Arc<Message>>, Vec<Arc<Message>>) {
        let mut chats = self
            .chats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sweep(&mut chats);
        let channel = chats.entry(Arc::from(chat)).or_insert_with(Channel::new);
        let tx = channel
            .tx
            .get_or_insert_with(|| broadcast::channel(CAPACITY).0);
        (tx.subscribe(), channel.recent.iter().cloned().collect())
    }

    pub fn unsubscribe(&self, chat: &str, receiver: broadcast::Receiver<Arc<Message>>) {
        drop(receiver);
        let mut chats = self
            .chats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(channel) = chats.get(chat)
            && channel.answers == 0
            && channel.viewers() == 0
        {
            chats.remove(chat);
        }
    }
}

/// Drops channels nobody needs (a viewer that left without unsubscribing).
fn sweep(chats: &mut HashMap<Arc<str>, Channel>) {
    chats.retain(|_, c| c.answers > 0 || c.viewers() > 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{Kind, Message};

    fn row(chat: &Arc<str>, n: usize) -> Arc<Message> {
        Arc::new(Message::new(
            chat.clone(),
            Arc::from("t"),
            "user",
            Kind::Text,
            serde_json::json!({"text": n.to_string()}),
        ))
    }

    #[test]
    fn rows_in_flight_are_bounded_and_gone_when_the_answers_end() {
        let live = Live::default();
        let chat: Arc<str> = Arc::from("c");
        live.start(&chat);
        live.start(&chat);
        for n in 0..CAPACITY + 44 {
            live.publish(&chat, &row(&chat, n));
        }
        let (rx, recent) = live.subscribe(&chat);
        assert_eq!(recent.len(), CAPACITY);
        let first: serde_json::Value = serde_json::from_str(&recent[0].json).unwrap();
        assert_eq!(first["text"], "44", "the newest are kept");
        live.unsubscribe(&chat, rx);
        // Another chat's rows are not this one's.
        assert!(live.subscribe("other").1.is_empty());
        live.finish(&chat);
        assert_eq!(
            live.subscribe(&chat).1.len(),
            CAPACITY,
            "one answer still runs"
        );
        live.finish(&chat);
        assert!(live.subscribe(&chat).1.is_empty());
    }
}
