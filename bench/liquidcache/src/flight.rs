//! A Flight service in front of LiquidCache's that counts the Arrow IPC
//! bytes (header + body of every `FlightData`) its `DoGet` streams send:
//! the same figure as Silt's `silt_flight_bytes_sent_total`. Every call is
//! passed through unchanged.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse,
    PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

type BoxedStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Wraps `inner`, adding the IPC bytes of its `DoGet` answers to `sent`.
pub struct CountingFlight<S> {
    inner: S,
    sent: Arc<AtomicU64>,
}

impl<S> CountingFlight<S> {
    /// Counts into `sent`.
    pub fn new(inner: S, sent: Arc<AtomicU64>) -> Self {
        CountingFlight { inner, sent }
    }
}

fn boxed<T, St>(response: Response<St>) -> Response<BoxedStream<T>>
where
    St: Stream<Item = Result<T, Status>> + Send + 'static,
{
    response.map(|s| Box::pin(s) as BoxedStream<T>)
}

#[tonic::async_trait]
impl<S: FlightService> FlightService for CountingFlight<S> {
    type HandshakeStream = BoxedStream<HandshakeResponse>;
    type ListFlightsStream = BoxedStream<FlightInfo>;
    type DoGetStream = BoxedStream<FlightData>;
    type DoPutStream = BoxedStream<PutResult>;
    type DoExchangeStream = BoxedStream<FlightData>;
    type DoActionStream = BoxedStream<arrow_flight::Result>;
    type ListActionsStream = BoxedStream<ActionType>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.inner.handshake(request).await.map(boxed)
    }

    async fn list_flights(&self, request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.inner.list_flights(request).await.map(boxed)
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.inner.get_flight_info(request).await
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        self.inner.poll_flight_info(request).await
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        self.inner.get_schema(request).await
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let sent = self.sent.clone();
        let response = self.inner.do_get(request).await?;
        Ok(response.map(|stream| {
            Box::pin(stream.inspect(move |item| {
                if let Ok(data) = item {
                    sent.fetch_add(
                        (data.data_header.len() + data.data_body.len()) as u64,
                        Ordering::Relaxed,
                    );
                }
            })) as BoxedStream<FlightData>
        }))
    }

    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        self.inner.do_put(request).await.map(boxed)
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.inner.do_exchange(request).await.map(boxed)
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        self.inner.do_action(request).await.map(boxed)
    }

    async fn list_actions(&self, request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        self.inner.list_actions(request).await.map(boxed)
    }
}
