//! Continuous batching: many generation requests decoded together on one [`Engine`].
//!
//! Up to `max_batch` sequences are live at a time. Each decode step is one forward over the
//! last token of every live sequence (one weight pass serves them all); a sequence that ends
//! frees its slot and the next request is admitted at once (its prompt is prefilled in a pass of
//! its own, then it joins the decode steps). Every sequence has its own KV cache, sized to its
//! prompt plus room that grows with what it generates, so memory follows the live sequences.
//!
//! Results never depend on the batch: the forward is row-invariant (see
//! [`Transformer::forward_batch`](super::transformer::Transformer::forward_batch)) and each
//! sequence samples from its own random stream (seed `sampling.seed + i` for sequence `i` of a
//! request), so a request's output is token-identical whatever it was batched with.

use std::time::Instant;

use super::engine::{logit_rows, Engine};
use super::error::{ModelError, Result};
use super::sampling::Sampler;
use super::transformer::{BatchRow, KvCache, Logits};
use super::{FinishReason, GenerateOutput, GenerateRequest, Generation, Sampling};

/// Sequences decoded together by default: on two cores, decode throughput at 8 is several times
/// that of one sequence (benches/batching.rs), and the KV memory of 8 live sequences is small.
pub const DEFAULT_BATCH: usize = 8;

/// What the scheduler reports while it runs.
pub enum BatchEvent<'a> {
    /// Sequence `seq` of job `job` has a new token; `text` is its whole text so far.
    Text { job: usize, seq: usize, text: &'a str },
    /// Job `job` has finished (or failed; a failure ends that job only).
    Done { job: usize, result: Result<GenerateOutput> },
}

/// Figures of one scheduler run, for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchStats {
    /// Tokens produced by all decode steps.
    pub decoded_tokens: usize,
    pub decode_steps: usize,
    pub prompt_tokens: usize,
    /// Seconds spent in prefill passes and in decode steps (forward, sampling, detokenizing).
    pub prefill_secs: f64,
    pub decode_secs: f64,
    /// The most KV-cache bytes held at once.
    pub peak_kv_bytes: usize,
}

/// A request admitted into the batch.
struct Job {
    id: usize,
    prompt_text: String,
    prompt_tokens: usize,
    prefill_secs: f64,
    decode_started: Instant,
    decoded: usize,
    stop: Vec<String>,
    generations: Vec<Option<Generation>>,
}

/// One live sequence.
pub(super) struct SequenceState {
    pub(super) sampler: Sampler,
    pub(super) tokens: Vec<u32>,
    pub(super) text: String,
    pub(super) finish: Option<FinishReason>,
}

struct Slot {
    /// Index into the scheduler's jobs.
    job: usize,
    seq: usize,
    max_new: usize,
    state: SequenceState,
}

/// Where the scheduler takes its work from: asked for the next job whenever a slot is free.
/// `wait` is true when nothing is running, so a source fed from outside (a server) may block
/// until a request arrives; `None` then ends the run.
pub trait JobSource {
    fn next_job(&mut self, wait: bool) -> Option<(usize, GenerateRequest)>;
}

impl<I: Iterator<Item = (usize, GenerateRequest)>> JobSource for I {
    fn next_job(&mut self, _wait: bool) -> Option<(usize, GenerateRequest)> {
        self.next()
    }
}

impl Engine {
    /// Generates for every request, decoding up to `max_batch` sequences together; outputs are
    /// in request order.
    pub fn generate_batched(
        &self,
        requests: &[GenerateRequest],
        max_batch: usize,
    ) -> Vec<Result<GenerateOutput>> {
        let mut results: Vec<Option<Result<GenerateOutput>>> = requests.iter().map(|_| None).collect();
        let mut source = requests.iter().cloned().enumerate();
        self.generate_continuous(max_batch, &mut source, &mut |event| {
            if let BatchEvent::Done { job, result } = event {
                results[job] = Some(result);
            }
        });
        results.into_iter().map(|r| r.expect("every job reports once")).collect()
    }

    /// The scheduler: runs jobs from `source` until it has no more, reporting through
    /// `on_event`. A request with `n` sequences takes `n` slots (all at once, so it may exceed
    /// `max_batch` when it runs alone).
    pub fn generate_continuous(
        &self,
        max_batch: usize,
        source: &mut dyn JobSource,
        on_event: &mut dyn FnMut(BatchEvent<'_>),
    ) -> BatchStats {
        let max_batch = max_batch.max(1);
        let mut stats = BatchStats::default();
        let mut jobs: Vec<Option<Job>> = Vec::new();
        let mut slots: Vec<Slot> = Vec::new();
        let mut caches: Vec<KvCache> = Vec::new();
        let mut waiting: Option<(usize, GenerateRequest)> = None;
        let mut exhausted = false;
        loop {
            // Admit work while slots are free.
            while !exhausted {
                let job = match waiting.take() {
                    Some(job) => job,
                    None => match source.next_job(slots.is_empty()) {
                        Some(job) => job,
                        None => {
                            exhausted = slots.is_empty();
                            break;
                        }
                    },
                };
                let n = job.1.n.max(1);
                if !slots.is_empty() && slots.len() + n > max_batch {
                    waiting = Some(job);
                    break;
                }
                let (id, request) = job;
                let prefill_started = Instant::now();
                let admitted = self.admit(id, &request, jobs.len(), on_event);
                stats.prefill_secs += prefill_started.elapsed().as_secs_f64();
                match admitted {
                    Err(e) => on_event(BatchEvent::Done { job: id, result: Err(e) }),
                    Ok((job, new_slots, cache)) => {
                        stats.prompt_tokens += job.prompt_tokens;
                        jobs.push(Some(job));
                        // The prompt's cache serves every sequence: copies for all but one.
                        for _ in 1..new_slots.len() {
                            caches.push(cache.clone());
                        }
                        caches.push(cache);
                        slots.extend(new_slots);
                    }
                }
                // Finished at once (no token budget, or an end token first).
                retire(&mut slots, &mut caches, &mut jobs, on_event);
                stats.peak_kv_bytes = stats.peak_kv_bytes.max(caches.iter().map(KvCache::bytes).sum());
            }
            if slots.is_empty() {
                if exhausted && waiting.is_none() {
                    return stats;
                }
                continue;
            }
            stats.peak_kv_bytes = stats.peak_kv_bytes.max(caches.iter().map(KvCache::bytes).sum());

            // One decode step over every live sequence.
            let step_started = Instant::now();
            let rows: Vec<BatchRow> = slots
                .iter()
                .enumerate()
                .map(|(i, s)| BatchRow {
                    seq: i,
                    token: *s.state.tokens.last().expect("a live sequence has a token"),
                    logits: true,
                })
                .collect();
            let step =
                self.transformer().forward_batch(&rows, &mut caches).and_then(|t| Ok(t.to_vec2::<f32>()?));
            stats.decode_steps += 1;
            match step {
                Ok(logits) => {
                    stats.decoded_tokens += slots.len();
                    for (slot, row) in slots.iter_mut().zip(&logits) {
                        // A job that failed earlier in this step is retired below.
                        let Some(job) = jobs[slot.job].as_mut() else { continue };
                        job.decoded += 1;
                        let token = slot.state.sampler.sample(row);
                        let pushed = self.push_token(&mut slot.state, token, &job.stop, slot.max_new);
                        if let Err(e) = pushed {
                            on_event(BatchEvent::Done { job: job.id, result: Err(e) });
                            jobs[slot.job] = None;
                            continue;
                        }
                        on_event(BatchEvent::Text { job: job.id, seq: slot.seq, text: &slot.state.text });
                    }
                }
                Err(e) => {
                    // A failed step fails every job in it; their slots are freed.
                    let message = crate::error_chain(&e);
                    for slot in &slots {
                        if let Some(job) = jobs[slot.job].take() {
                            let err = ModelError::Step(message.clone());
                            on_event(BatchEvent::Done { job: job.id, result: Err(err) });
                        }
                    }
                    slots.clear();
                    caches.clear();
                    continue;
                }
            }
            stats.decode_secs += step_started.elapsed().as_secs_f64();
            retire(&mut slots, &mut caches, &mut jobs, on_event);
        }
    }
}

impl Engine {
    /// Prefills `request` and samples each sequence's first token: the job (at index
    /// `job_index` of the scheduler's jobs), its slots and the prompt's cache.
    fn admit(
        &self,
        id: usize,
        request: &GenerateRequest,
        job_index: usize,
        on_event: &mut dyn FnMut(BatchEvent<'_>),
    ) -> Result<(Job, Vec<Slot>, KvCache)> {
        let prefilled = self.prefill(request)?;
        let n = request.n.max(1);
        let mut slots = Vec::with_capacity(n);
        for seq in 0..n {
            let sampler = Sampler::new(Sampling {
                seed: request.sampling.seed.wrapping_add(seq as u64),
                ..request.sampling
            });
            let mut state = SequenceState { sampler, tokens: Vec::new(), text: String::new(), finish: None };
            if prefilled.max_new == 0 {
                state.finish = Some(FinishReason::Length);
            } else {
                let token = state.sampler.sample(&prefilled.logits);
                self.push_token(&mut state, token, &request.stop, prefilled.max_new)?;
                on_event(BatchEvent::Text { job: id, seq, text: &state.text });
            }
            slots.push(Slot { job: job_index, seq, max_new: prefilled.max_new, state });
        }
        let job = Job {
            id,
            prompt_text: prefilled.prompt_text,
            prompt_tokens: prefilled.prompt_tokens,
            prefill_secs: prefilled.secs,
            decode_started: Instant::now(),
            decoded: 0,
            stop: request.stop.clone(),
            generations: vec![None; n],
        };
        Ok((job, slots, prefilled.cache))
    }
}

/// Frees the slots of finished sequences (and of failed jobs) and reports jobs whose every
/// sequence has finished.
fn retire(
    slots: &mut Vec<Slot>,
    caches: &mut Vec<KvCache>,
    jobs: &mut [Option<Job>],
    on_event: &mut dyn FnMut(BatchEvent<'_>),
) {
    let mut i = 0;
    while i < slots.len() {
        let slot = &slots[i];
        let job_gone = jobs[slot.job].is_none();
        if !job_gone && slot.state.finish.is_none() {
            i += 1;
            continue;
        }
        let slot = slots.remove(i);
        caches.remove(i);
        let Some(job) = jobs[slot.job].as_mut() else { continue };
        let SequenceState { tokens, text, finish, .. } = slot.state;
        job.generations[slot.seq] = Some(Generation { text, tokens, finish: finish.expect("checked above") });
        if job.generations.iter().all(Option::is_some) {
            let job = jobs[slot.job].take().expect("checked above");
            let decode_secs = job.decode_started.elapsed().as_secs_f64();
            let output = GenerateOutput {
                prompt_text: job.prompt_text,
                prompt_tokens: job.prompt_tokens,
                sequences: job.generations.into_iter().map(|g| g.expect("all finished")).collect(),
                prefill_tok_s: job.prompt_tokens as f64 / job.prefill_secs.max(1e-9),
                decode_tok_s: if job.decoded == 0 { 0.0 } else { job.decoded as f64 / decode_secs.max(1e-9) },
            };
            on_event(BatchEvent::Done { job: job.id, result: Ok(output) });
        }
    }
}

/// Generated positions a new sequence's KV cache has room for before it grows.
const INITIAL_ROOM: usize = 256;

/// A request's prompt after its prefill pass.
struct Prefilled {
    prompt_text: String,
    prompt_tokens: usize,
    max_new: usize,
    cache: KvCache,
    /// Logits after the prompt's last token.
    logits: Vec<f32>,
    secs: f64,
}

impl Engine {
    fn prefill(&self, request: &GenerateRequest) -> Result<Prefilled> {
        let (prompt_text, prompt) = self.prompt_tokens(&request.prompt)?;
        let max_ctx = self.transformer().config.context_length;
        if prompt.len() >= max_ctx {
            return Err(ModelError::ContextTooLong {
                what: "the prompt".into(),
                tokens: prompt.len(),
                max: max_ctx - 1,
            });
        }
        let max_new = request.max_tokens.min(max_ctx - prompt.len());
        let started = Instant::now();
        // Room for a typical answer; the cache grows if the sequence runs longer.
        let mut cache = self.transformer().new_cache(prompt.len() + max_new.min(INITIAL_ROOM));
        let logits = logit_rows(&self.transformer().forward(&prompt, &mut cache, Logits::Last)?)?.remove(0);
        Ok(Prefilled {
            prompt_text,
            prompt_tokens: prompt.len(),
            max_new,
            cache,
            logits,
            secs: started.elapsed().as_secs_f64(),
        })
    }
}
