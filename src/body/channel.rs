//! A body written by a task of its own: frames arrive over a bounded
//! channel, and the client leaving (the body dropped) aborts the task.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::{Body, BoxError};

/// Spawns `task` with the sending end of a channel of `frames` and returns
/// the body that reads it.
pub fn spawn<F, Fut>(frames: usize, task: F) -> Body
where
    F: FnOnce(mpsc::Sender<Bytes>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(frames);
    // The task works for the request: it keeps its tenant and trace.
    let task = tokio::spawn(crate::telemetry::scope::carry(task(tx)));
    super::boxed(ChannelBody {
        rx,
        task: task.abort_handle(),
    })
}

struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
    task: AbortHandle,
}

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.rx
            .poll_recv(cx)
            .map(|bytes| bytes.map(|b| Ok(Frame::data(b))))
    }
}

impl Drop for ChannelBody {
    fn drop(&mut self) {
        self.task.abort();
    }
}
