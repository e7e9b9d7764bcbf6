//! The message queue the interruption controller reads (SQS on AWS, `aws::queue`): resolve a
//! queue by name, long-poll it, delete what was handled. A trait so that the controller's
//! handling can be tested with a scripted queue.

use async_trait::async_trait;

/// One message as received: its body and the handle that deletes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The handle `delete` takes (SQS's receipt handle).
    pub receipt_handle: String,
    /// The message body (an EventBridge event, for the interruption queue).
    pub body: String,
}

/// A queue found by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// Its URL, which every other call takes.
    pub url: String,
    /// Its ARN (what an IAM policy names), empty when the service did not say.
    pub arn: String,
}

/// A failed queue call.
#[derive(Debug, thiserror::Error)]
#[error("{operation} on queue {queue}: {message}")]
pub struct QueueError {
    /// The call, as its IAM action (`sqs:GetQueueUrl`, `sqs:ReceiveMessage`, …).
    pub operation: &'static str,
    /// The queue's name or URL.
    pub queue: String,
    /// The error code the service answered with, when it answered (`AccessDenied`, …).
    pub code: Option<String>,
    /// What went wrong, with the service's message.
    pub message: String,
}

impl QueueError {
    /// Whether the call failed because the queue does not exist (SQS answers
    /// `AWS.SimpleQueueService.NonExistentQueue` or `QueueDoesNotExist`).
    pub fn is_not_found(&self) -> bool {
        self.code
            .as_deref()
            .is_some_and(|c| c.contains("NonExistentQueue") || c.contains("QueueDoesNotExist"))
    }
}

/// A message queue.
#[async_trait]
pub trait Queue: Send + Sync {
    /// The queue called `name` (SQS `GetQueueUrl`, then `GetQueueAttributes` for its ARN, which
    /// also shows it can be read).
    async fn resolve(&self, name: &str) -> Result<QueueInfo, QueueError>;
    /// Up to 10 messages, waiting up to 20 s for the first (SQS `ReceiveMessage`, long polling).
    /// A message received and not deleted is delivered again after the queue's visibility
    /// timeout.
    async fn receive(&self, url: &str) -> Result<Vec<Received>, QueueError>;
    /// Deletes a received message (SQS `DeleteMessage`).
    async fn delete(&self, url: &str, receipt_handle: &str) -> Result<(), QueueError>;
}
