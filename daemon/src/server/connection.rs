//! One connection: bytes in, frames, requests, dispatch, replies out.
//!
//! Requests run concurrently (up to `max_in_flight`), so replies may leave in another order;
//! they carry the request's id. A frame that is too large or does not decode gets an error
//! reply and the connection goes on. On shutdown or end of input the connection stops reading,
//! lets its in-flight requests finish and flushes their replies.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use recalld_protocol::{
    decode_request_lean, encode_frame, encode_frame_with, encode_reply, encode_reply_into, ErrorBody, ErrorCode, Frame,
    FrameDecoder, FrameError, Reply,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::peer::Peer;
use super::shutdown::Shutdown;
use super::{dispatch, AppState, Counters};

pub async fn run(conn: u64, stream: UnixStream, state: Arc<AppState>, shutdown: Shutdown) {
    let span = tracing::info_span!("conn", id = conn);
    async move {
        Counters::bump(&state.counters.connections_total);
        // Whose memories this connection may touch is fixed here, from the kernel's word.
        let peer = match stream.peer_cred() {
            Ok(cred) => Arc::new(state.namespaces.peer(cred.uid(), cred.gid(), cred.pid())),
            Err(e) => {
                tracing::warn!(error = %e, "no peer credentials; closing");
                return;
            }
        };
        tracing::debug!(uid = peer.uid, pid = ?peer.pid, "open");
        state.counters.connections_open.fetch_add(1, Ordering::Relaxed);
        serve(stream, &state, &peer, shutdown).await;
        state.counters.connections_open.fetch_sub(1, Ordering::Relaxed);
        tracing::debug!("closed");
    }
    .instrument(span)
    .await
}

async fn serve(stream: UnixStream, state: &Arc<AppState>, peer: &Arc<Peer>, mut shutdown: Shutdown) {
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Reply>(state.max_in_flight);
    let writer = tokio::spawn(write_replies(wr, rx, state.max_frame_bytes));
    let permits = Arc::new(Semaphore::new(state.max_in_flight));
    let mut in_flight = JoinSet::new();
    let mut decoder = FrameDecoder::new(state.max_frame_bytes);
    let mut buf = BytesMut::with_capacity(8 * 1024);

    'read: loop {
        while let Some(frame) = decoder.decode(&mut buf) {
            let body = match frame {
                Frame::TooLarge { len } => {
                    Counters::bump(&state.counters.bad_frames_total);
                    tracing::warn!(len, max = state.max_frame_bytes, "frame too large");
                    let msg = format!(
                        "frame of {len} bytes exceeds the limit of {} bytes",
                        state.max_frame_bytes
                    );
                    let _ = tx
                        .send(Reply::err(0, ErrorBody::new(ErrorCode::FrameTooLarge, msg)))
                        .await;
                    continue;
                }
                Frame::Body(body) => body,
            };
            let bytes = body.len();
            let (request, passed) = match decode_request_lean(body) {
                Ok(decoded) => decoded,
                Err(bad) => {
                    Counters::bump(&state.counters.bad_frames_total);
                    tracing::warn!(bytes, error = %bad.error.message, "bad request frame");
                    let _ = tx.send(Reply::err(bad.id, bad.error)).await;
                    continue;
                }
            };
            // Backpressure: stop reading while max_in_flight requests are running.
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
                _ = shutdown.wait() => break 'read,
            };
            let state = state.clone();
            let peer = peer.clone();
            let tx = tx.clone();
            in_flight.spawn(async move {
                let reply = dispatch::handle(&state, &peer, request, passed, bytes).await;
                let _ = tx.send(reply).await;
                drop(permit);
            });
        }
        // Reap finished requests so the set does not grow on a long-lived connection.
        while in_flight.try_join_next().is_some() {}
        let read = tokio::select! {
            r = rd.read_buf(&mut buf) => r,
            _ = shutdown.wait() => break,
        };
        match read {
            Ok(0) => {
                if decoder.is_mid_frame(&buf) {
                    tracing::warn!(buffered = buf.len(), "connection closed in the middle of a frame");
                }
                break;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "read failed");
                break;
            }
        }
    }
    while in_flight.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
}

async fn write_replies(
    mut wr: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Reply>,
    max_frame_bytes: usize,
) {
    let mut out = BytesMut::with_capacity(8 * 1024);
    while let Some(reply) = rx.recv().await {
        push_reply(&mut out, &reply, max_frame_bytes);
        // Batch whatever else is ready into one write.
        while out.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok(reply) => push_reply(&mut out, &reply, max_frame_bytes),
                Err(_) => break,
            }
        }
        if let Err(e) = wr.write_all(&out).await {
            tracing::debug!(error = %e, "write failed; peer gone");
            return;
        }
        out.clear();
    }
    let _ = wr.shutdown().await;
}

fn push_reply(out: &mut BytesMut, reply: &Reply, max_frame_bytes: usize) {
    // Encoded in place: `out` is kept between replies, so a reply's bytes are written once.
    if let Err(FrameError::TooLarge { len, .. }) =
        encode_frame_with(out, max_frame_bytes, |b| encode_reply_into(reply, b))
    {
        tracing::warn!(bytes = len, id = reply.id, "reply over the frame limit");
        let err = ErrorBody::new(
            ErrorCode::ResourceExhausted,
            format!("reply of {len} bytes exceeds the frame limit of {max_frame_bytes} bytes"),
        );
        let body = encode_reply(&Reply::err(reply.id, err));
        encode_frame(&body, usize::MAX, out).expect("an error reply is small");
    }
}
