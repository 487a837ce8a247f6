//! Where a remote store is: a URL, and the storage options that reach it.

use std::str::FromStr;
use std::sync::Arc;

use loaderx_gather::{Error, Result};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};
use url::Url;

use crate::fetch::FetchOptions;

/// The storage options loaderx reads itself rather than passing to
/// `object_store`: `from_env` and the [`FetchOptions`].
pub const LOADERX_OPTIONS: [&str; 7] = [
    "from_env",
    "max_concurrency",
    "coalesce_gap",
    "max_request_bytes",
    "retries",
    "retry_backoff",
    "request_timeout",
];

/// A store's URL, the object store that serves it and the options to build a
/// client for it, checked.
#[derive(Clone, Debug)]
pub struct Location {
    /// The URL without a trailing slash, as errors name it.
    url: String,
    scheme: ObjectStoreScheme,
    parsed: Url,
    prefix: Path,
    /// `object_store` configuration, names as given.
    config: Vec<(String, String)>,
    from_env: bool,
}

/// Whether `s` names a remote store rather than a local path.
pub fn is_url(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
    })
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(Error::invalid(format!(
            "storage option {key} must be true or false, got {v:?}"
        ))),
    }
}

impl Location {
    /// Parses `url` and splits `options` into what loaderx reads itself (see
    /// [`LOADERX_OPTIONS`]) and `object_store` configuration, whose names must be
    /// ones the URL's store knows (`aws_endpoint` or `endpoint`, `aws_region`,
    /// `allow_http`...). A name neither knows is an error, never ignored.
    pub fn parse(url: &str, options: &[(String, String)]) -> Result<(Location, FetchOptions)> {
        let trimmed = url.trim_end_matches('/');
        let parsed = Url::parse(trimmed)
            .map_err(|e| Error::invalid(format!("{url}: not a valid URL: {e}")))?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|_| {
            Error::invalid(format!(
                "{url}: not a store URL loaderx reads (s3://, gs://, az://, http://, https:// or file://)"
            ))
        })?;
        if matches!(scheme, ObjectStoreScheme::Memory) {
            return Err(Error::invalid(format!(
                "{url}: memory:// stores live in no other process; write a local store instead"
            )));
        }
        let mut fetch = FetchOptions::default();
        let mut config = Vec::new();
        let mut from_env = false;
        for (key, value) in options {
            let k = key.to_ascii_lowercase();
            if k == "from_env" {
                from_env = parse_bool(key, value)?;
            } else if LOADERX_OPTIONS.contains(&k.as_str()) {
                fetch.set(&k, value)?;
            } else {
                let known = match scheme {
                    ObjectStoreScheme::AmazonS3 => AmazonS3ConfigKey::from_str(&k).is_ok(),
                    ObjectStoreScheme::GoogleCloudStorage => GoogleConfigKey::from_str(&k).is_ok(),
                    ObjectStoreScheme::MicrosoftAzure => AzureConfigKey::from_str(&k).is_ok(),
                    ObjectStoreScheme::Http => ClientConfigKey::from_str(&k).is_ok(),
                    _ => false,
                };
                if !known {
                    return Err(Error::invalid(format!(
                        "{url}: unknown storage option {key:?} for this kind of store (names are \
                         object_store's configuration keys, or one of loaderx's: {})",
                        LOADERX_OPTIONS.join(", ")
                    )));
                }
                config.push((k, value.clone()));
            }
        }
        if from_env
            && !matches!(
                scheme,
                ObjectStoreScheme::AmazonS3
                    | ObjectStoreScheme::GoogleCloudStorage
                    | ObjectStoreScheme::MicrosoftAzure
            )
        {
            return Err(Error::invalid(format!(
                "{url}: from_env applies to s3://, gs:// and az:// stores only"
            )));
        }
        if matches!(scheme, ObjectStoreScheme::MicrosoftAzure) {
            let named = |want: AzureConfigKey| {
                config
                    .iter()
                    .filter(move |(k, _)| AzureConfigKey::from_str(k).is_ok_and(|k| k == want))
            };
            let emulator =
                named(AzureConfigKey::UseEmulator).any(|(k, v)| parse_bool(k, v).unwrap_or(false));
            if emulator && named(AzureConfigKey::Endpoint).next().is_some() {
                return Err(Error::invalid(format!(
                    "{url}: azure_storage_use_emulator ignores azure_storage_endpoint (object_store \
                     sends an emulator's requests to AZURITE_BLOB_STORAGE_URL, or else \
                     http://127.0.0.1:10000); for another address give the endpoint, account \
                     name and key without use_emulator"
                )));
            }
        }
        let allows_http = config
            .iter()
            .any(|(k, v)| k.ends_with("allow_http") && parse_bool(k, v).unwrap_or(false));
        if matches!(scheme, ObjectStoreScheme::Http) && parsed.scheme() == "http" && !allows_http {
            return Err(Error::invalid(format!(
                "{url}: plain http:// needs the storage option allow_http=true \
                 (nothing is encrypted or authenticated over it)"
            )));
        }
        let loc = Location {
            url: trimmed.to_string(),
            scheme,
            parsed,
            prefix,
            config,
            from_env,
        };
        // Build once so that a bad option value is an error at open.
        loc.client(0)?;
        Ok((loc, fetch))
    }

    /// The store's URL, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the store's file `name`.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// The path of the store's file `name` inside the object store.
    pub(crate) fn path_of(&self, name: &str) -> Path {
        self.prefix.clone().join(name)
    }

    /// A client for the store. `object_store` retries a failed request itself
    /// `retries` times; reads pass 0 and retry in [`crate::fetch`], where a short
    /// body is caught too.
    pub(crate) fn client(&self, retries: usize) -> Result<Arc<dyn ObjectStore>> {
        // reqwest is built without a TLS provider of its own (aws-lc-rs is a
        // long C build); ring serves, installed for the process unless the
        // embedding program installed another first.
        static TLS: std::sync::Once = std::sync::Once::new();
        TLS.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let retry = RetryConfig {
            max_retries: retries,
            ..RetryConfig::default()
        };
        let bad = |e: object_store::Error| {
            Error::invalid(format!("{}: cannot configure the store: {e}", self.url))
        };
        let url = self.parsed.as_str();
        let store: Arc<dyn ObjectStore> = match self.scheme {
            ObjectStoreScheme::Local => {
                if !self.config.is_empty() {
                    return Err(Error::invalid(format!(
                        "{}: file:// stores take no object_store options",
                        self.url
                    )));
                }
                Arc::new(LocalFileSystem::new())
            }
            ObjectStoreScheme::AmazonS3 => {
                let mut b = if self.from_env {
                    AmazonS3Builder::from_env()
                } else {
                    AmazonS3Builder::new()
                };
                b = b.with_url(url).with_retry(retry);
                for (k, v) in &self.config {
                    b = b.with_config(AmazonS3ConfigKey::from_str(k).map_err(bad)?, v);
                }
                Arc::new(b.build().map_err(bad)?)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let mut b = if self.from_env {
                    GoogleCloudStorageBuilder::from_env()
                } else {
                    GoogleCloudStorageBuilder::new()
                };
                b = b.with_url(url).with_retry(retry);
                for (k, v) in &self.config {
                    b = b.with_config(GoogleConfigKey::from_str(k).map_err(bad)?, v);
                }
                Arc::new(b.build().map_err(bad)?)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let mut b = if self.from_env {
                    MicrosoftAzureBuilder::from_env()
                } else {
                    MicrosoftAzureBuilder::new()
                };
                b = b.with_url(url).with_retry(retry);
                for (k, v) in &self.config {
                    b = b.with_config(AzureConfigKey::from_str(k).map_err(bad)?, v);
                }
                Arc::new(b.build().map_err(bad)?)
            }
            ObjectStoreScheme::Http => {
                let base = &self.parsed[..url::Position::BeforePath];
                let mut b = HttpBuilder::new().with_url(base).with_retry(retry);
                for (k, v) in &self.config {
                    b = b.with_config(ClientConfigKey::from_str(k).map_err(bad)?, v);
                }
                Arc::new(b.build().map_err(bad)?)
            }
            _ => {
                return Err(Error::invalid(format!(
                    "{}: this kind of store is not supported",
                    self.url
                )))
            }
        };
        Ok(store)
    }
}
