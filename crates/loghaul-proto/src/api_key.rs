//! How a client presents its API key: the `x-api-key` metadata of every call.

/// The metadata key clients put their API key in.
pub const API_KEY_HEADER: &str = "x-api-key";

/// A key that cannot travel as gRPC metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the API key contains characters not allowed in gRPC metadata")]
pub struct InvalidApiKey;

/// A request carrying `key`, when there is one, the way every client of the service sends it.
pub fn request_with_key<T>(
    message: T,
    key: Option<&str>,
) -> Result<tonic::Request<T>, InvalidApiKey> {
    let mut request = tonic::Request::new(message);
    if let Some(key) = key {
        let value: tonic::metadata::MetadataValue<_> = key.parse().map_err(|_| InvalidApiKey)?;
        request.metadata_mut().insert(API_KEY_HEADER, value);
    }
    Ok(request)
}
