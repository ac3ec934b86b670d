//! The server's generation thread: every request's generation joins one continuous batch
//! ([`Engine::generate_continuous`]), so concurrent clients are decoded together.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use crate::model::batch::{BatchEvent, JobSource};
use crate::model::{Engine, GenerateOutput, GenerateRequest, ModelError};

/// What a request hears back from the generation thread.
pub enum JobEvent {
    /// The whole text of sequence `seq` so far (sent only to streaming requests).
    Text {
        seq: usize,
        text: String,
    },
    Done(Result<GenerateOutput, ModelError>),
}

struct Submitted {
    request: GenerateRequest,
    stream: bool,
    events: UnboundedSender<JobEvent>,
}

/// Hands generation requests to the generation thread.
pub struct Batcher {
    sender: mpsc::Sender<Submitted>,
}

/// Where each running job's events go.
type Routes = Rc<RefCell<HashMap<usize, (bool, UnboundedSender<JobEvent>)>>>;

struct ChannelSource {
    receiver: mpsc::Receiver<Submitted>,
    routes: Routes,
    next_id: usize,
}

impl JobSource for ChannelSource {
    fn next_job(&mut self, wait: bool) -> Option<(usize, GenerateRequest)> {
        let submitted = if wait { self.receiver.recv().ok()? } else { self.receiver.try_recv().ok()? };
        let id = self.next_id;
        self.next_id += 1;
        self.routes.borrow_mut().insert(id, (submitted.stream, submitted.events));
        Some((id, submitted.request))
    }
}

impl Batcher {
    /// Starts the generation thread; it ends when the batcher is dropped.
    pub fn start(engine: Arc<Engine>, max_batch: usize) -> Self {
        let (sender, receiver) = mpsc::channel::<Submitted>();
        std::thread::spawn(move || {
            let routes: Routes = Rc::default();
            let mut source = ChannelSource { receiver, routes: routes.clone(), next_id: 0 };
            engine.generate_continuous(max_batch, &mut source, &mut |event| match event {
                BatchEvent::Text { job, seq, text } => {
                    if let Some((true, events)) = routes.borrow().get(&job) {
                        let _ = events.send(JobEvent::Text { seq, text: text.to_owned() });
                    }
                }
                BatchEvent::Done { job, result } => {
                    if let Some((_, events)) = routes.borrow_mut().remove(&job) {
                        let _ = events.send(JobEvent::Done(result));
                    }
                }
            });
        });
        Self { sender }
    }

    /// Queues `request`; its events arrive on the returned receiver.
    pub fn submit(
        &self,
        request: GenerateRequest,
        stream: bool,
    ) -> tokio::sync::mpsc::UnboundedReceiver<JobEvent> {
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        if let Err(mpsc::SendError(lost)) = self.sender.send(Submitted { request, stream, events }) {
            let _ = lost
                .events
                .send(JobEvent::Done(Err(ModelError::Step("the generation thread has stopped".into()))));
        }
        receiver
    }

    /// Generates for `request` in the shared batch.
    pub async fn generate(&self, request: GenerateRequest) -> Result<GenerateOutput, ModelError> {
        Self::finished(self.submit(request, false)).await
    }

    /// The result a submitted request's events end with.
    pub async fn finished(
        mut events: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    ) -> Result<GenerateOutput, ModelError> {
        while let Some(event) = events.recv().await {
            if let JobEvent::Done(result) = event {
                return result;
            }
        }
        Err(ModelError::Step("the generation thread has stopped".into()))
    }
}
