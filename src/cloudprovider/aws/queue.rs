//! The interruption queue on SQS (`aws@v0.27.0:pkg/controllers/interruption/controller.go`):
//! `GetQueueUrl` and `GetQueueAttributes` (its ARN) once, `ReceiveMessage`
//! with long polling (10 messages, 20 s wait, 20 s visibility as Karpenter's
//! `aws@v0.27.0:pkg/controllers/interruption/sqs.go`), `DeleteMessage` per handled message.

use async_trait::async_trait;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;

use crate::cloudprovider::queue::{Queue, QueueError, QueueInfo, Received};

/// Messages per `ReceiveMessage` (SQS's maximum).
const MAX_MESSAGES: i32 = 10;
/// Long-polling wait (SQS's maximum).
const WAIT_SECONDS: i32 = 20;
/// How long a received message stays hidden before it is delivered again if not deleted.
const VISIBILITY_SECONDS: i32 = 20;

/// An SQS client as a [`Queue`].
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
}

impl SqsQueue {
    /// The queue API over `client`.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        SqsQueue { client }
    }
}

fn queue_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug + 'static>(
    operation: &'static str,
    queue: &str,
    e: SdkError<E, R>,
) -> QueueError {
    let code = e.code().map(str::to_string);
    let message = match (&code, e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.clone(),
        _ => crate::telemetry::chain(&e),
    };
    QueueError {
        operation,
        queue: queue.to_string(),
        code,
        message,
    }
}

#[async_trait]
impl Queue for SqsQueue {
    async fn resolve(&self, name: &str) -> Result<QueueInfo, QueueError> {
        let out = self
            .client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| queue_error("sqs:GetQueueUrl", name, e))?;
        let url = out.queue_url.ok_or_else(|| QueueError {
            operation: "sqs:GetQueueUrl",
            queue: name.to_string(),
            code: None,
            message: "the answer has no queue URL".to_string(),
        })?;
        let attributes = self
            .client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| queue_error("sqs:GetQueueAttributes", &url, e))?;
        let arn = attributes
            .attributes
            .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
            .unwrap_or_default();
        Ok(QueueInfo { url, arn })
    }

    async fn receive(&self, url: &str) -> Result<Vec<Received>, QueueError> {
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(MAX_MESSAGES)
            .wait_time_seconds(WAIT_SECONDS)
            .visibility_timeout(VISIBILITY_SECONDS)
            .send()
            .await
            .map_err(|e| queue_error("sqs:ReceiveMessage", url, e))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                Some(Received {
                    receipt_handle: m.receipt_handle?,
                    body: m.body.unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn delete(&self, url: &str, receipt_handle: &str) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| queue_error("sqs:DeleteMessage", url, e))?;
        Ok(())
    }
}
