//! AWS error codes → `cloudprovider::Error`. Which codes mean "gone" and which mean "no
//! capacity" is decided here only.

use std::fmt;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::cloudprovider::Error;

/// Fleet error codes that mean the offering has no capacity now
/// (`aws@v0.27.0:pkg/errors/errors.go` `unfulfillableCapacityErrorCodes`).
pub const INSUFFICIENT_CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
];

/// Codes that mean the object does not exist.
pub const NOT_FOUND_CODES: &[&str] = &[
    "InvalidInstanceID.NotFound",
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateId.NotFound",
    "ParameterNotFound",
];

/// Whether `code` is a capacity error.
pub fn is_insufficient_capacity(code: &str) -> bool {
    INSUFFICIENT_CAPACITY_CODES.contains(&code)
}

/// Whether `code` means the object does not exist.
pub fn is_not_found(code: &str) -> bool {
    NOT_FOUND_CODES.contains(&code)
}

/// What AWS said, with its code when it has one.
#[derive(Debug)]
pub struct AwsError {
    /// The AWS error code.
    pub code: Option<String>,
    /// The message, or the whole SDK error chain for transport failures.
    pub message: String,
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for AwsError {}

/// Wraps an SDK error of `operation` (`ec2:DescribeSubnets`) as `Error::Api`.
pub fn api<E, R>(operation: &'static str, err: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    let code = err.code().map(str::to_string);
    let message = match (&code, err.message()) {
        (Some(_), Some(m)) => m.to_string(),
        _ => DisplayErrorContext(&err).to_string(),
    };
    Error::Api {
        operation,
        code: code.clone(),
        source: Box::new(AwsError { code, message }),
    }
}

/// Like `api`, but a not-found code becomes `Error::NotFound(what)`.
pub fn api_or_not_found<E, R>(operation: &'static str, what: impl Into<String>, err: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    if err.code().is_some_and(is_not_found) {
        return Error::NotFound(what.into());
    }
    api(operation, err)
}

/// The AWS code of an `Error::Api`.
pub fn code(err: &Error) -> Option<&str> {
    match err {
        Error::Api { code, .. } => code.as_deref(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_capacity_and_not_found_codes() {
        assert!(is_insufficient_capacity("InsufficientInstanceCapacity"));
        assert!(is_insufficient_capacity("UnfulfillableCapacity"));
        assert!(!is_insufficient_capacity("InvalidParameterValue"));
        assert!(is_not_found("InvalidInstanceID.NotFound"));
        assert!(!is_not_found("UnauthorizedOperation"));
    }

    #[test]
    fn api_errors_name_the_operation_and_code() {
        let err = Error::Api {
            operation: "ec2:CreateFleet",
            code: Some("UnauthorizedOperation".into()),
            source: Box::new(AwsError {
                code: Some("UnauthorizedOperation".into()),
                message: "denied".into(),
            }),
        };
        assert_eq!(err.to_string(), "ec2:CreateFleet failed with UnauthorizedOperation");
        assert_eq!(
            std::error::Error::source(&err).unwrap().to_string(),
            "UnauthorizedOperation: denied"
        );
        assert_eq!(code(&err), Some("UnauthorizedOperation"));
        assert_eq!(err.kind(), "api");
    }
}
