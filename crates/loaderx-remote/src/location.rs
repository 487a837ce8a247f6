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

use crate::options::{FetchOptions, OptionValue, SplitOptions, LOADERX_OPTIONS};

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

/// An `object_store` option's string as a yes or no, as it reads one.
fn config_flag(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1")
}

impl Location {
    /// Parses `url` and splits `options` once into what loaderx reads itself
    /// (see [`LOADERX_OPTIONS`]), typed, and `object_store` configuration, whose
    /// names must be ones the URL's store knows (`aws_endpoint` or `endpoint`,
    /// `aws_region`, `allow_http`...). A name neither knows is an error, never
    /// ignored, and so is a value either refuses: the error names its key.
    pub fn parse(url: &str, options: &[(String, OptionValue)]) -> Result<(Location, FetchOptions)> {
        crate::key::check_written(url)?;
        // Trailing slashes name the same store; the scheme's "//" is not one.
        let body = url.find("://").map_or(0, |i| i + 3);
        let trimmed = &url[..url.trim_end_matches('/').len().max(body)];
        if trimmed.len() == body {
            return Err(Error::invalid(format!(
                "{url}: names no store: give its location after {}",
                &url[..body]
            )));
        }
        let parsed = Url::parse(trimmed)
            .map_err(|e| Error::invalid(format!("{url}: not a valid URL: {e}")))?;
        crate::key::check_parsed(url, &parsed)?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|_| {
            Error::invalid(format!(
                "{url}: not a store URL loaderx reads (s3://, gs://, az://, http://, https:// or file://)"
            ))
        })?;
        let bucket = matches!(
            scheme,
            ObjectStoreScheme::AmazonS3
                | ObjectStoreScheme::GoogleCloudStorage
                | ObjectStoreScheme::MicrosoftAzure
        );
        if bucket && prefix.as_ref().is_empty() {
            return Err(Error::invalid(format!(
                "{url}: names a bucket but no key in it; a store lives at a key inside its \
                 bucket (s3://bucket/store), never at the bucket's root"
            )));
        }
        if matches!(scheme, ObjectStoreScheme::Memory) {
            return Err(Error::invalid(format!(
                "{url}: memory:// stores live in no other process; write a local store instead"
            )));
        }
        let SplitOptions {
            fetch,
            from_env,
            config,
        } = SplitOptions::split(options)?;
        for (k, _) in &config {
            let known = match scheme {
                ObjectStoreScheme::AmazonS3 => AmazonS3ConfigKey::from_str(k).is_ok(),
                ObjectStoreScheme::GoogleCloudStorage => GoogleConfigKey::from_str(k).is_ok(),
                ObjectStoreScheme::MicrosoftAzure => AzureConfigKey::from_str(k).is_ok(),
                ObjectStoreScheme::Http => ClientConfigKey::from_str(k).is_ok(),
                _ => false,
            };
            if !known {
                let given = options
                    .iter()
                    .find(|(g, _)| g.eq_ignore_ascii_case(k))
                    .map_or(k.as_str(), |(g, _)| g.as_str());
                return Err(Error::invalid(format!(
                    "{url}: unknown storage option {given:?} for this kind of store (names are \
                     object_store's configuration keys, or one of loaderx's: {})",
                    LOADERX_OPTIONS.join(", ")
                )));
            }
        }
        if from_env && !bucket {
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
            let emulator = named(AzureConfigKey::UseEmulator).any(|(_, v)| config_flag(v));
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
            .any(|(k, v)| k.ends_with("allow_http") && config_flag(v));
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
        // Build once so that a bad option value is an error at open, naming the
        // option a client cannot be built with.
        if let Err(e) = loc.client(0) {
            return Err(loc.culprit().unwrap_or(e));
        }
        Ok((loc, fetch))
    }

    /// Why a client cannot be built, naming the first option that alone makes
    /// the build fail; `None` when none does.
    fn culprit(&self) -> Option<Error> {
        self.config.iter().find_map(|(k, v)| {
            let alone = Location {
                config: vec![(k.clone(), v.clone())],
                ..self.clone()
            };
            let e = alone.client(0).err()?;
            Some(Error::invalid(format!(
                "{}: storage option {k} = {v:?} is refused: {}",
                self.url,
                e.to_string().trim_start_matches(&format!("{}: ", self.url))
            )))
        })
    }

    /// The store's URL, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory of a `file://` store; `None` for any other kind.
    pub(crate) fn local_dir(&self) -> Option<std::path::PathBuf> {
        match self.scheme {
            ObjectStoreScheme::Local => self.parsed.to_file_path().ok(),
            _ => None,
        }
    }

    /// The URL of the store's file `name`.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// Refuses a `file://` store's file `name` that exists but is not a regular
    /// file: `object_store` opens files blocking, and a FIFO's open waits for a
    /// writer that may never come. Any other store, or a missing file, is for
    /// the request to report.
    pub(crate) fn check_local_file(&self, name: &str) -> Result<()> {
        let Some(dir) = self.local_dir() else {
            return Ok(());
        };
        let path = dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => Err(Error::Store(zrecord::Error::Corrupt {
                path: self.url_of(name).into(),
                record: None,
                msg: "not a regular file (a store holds only regular files)".into(),
            })),
            _ => Ok(()),
        }
    }

    /// The store's own path in its bucket (the prefix of every file's).
    pub(crate) fn prefix(&self) -> &Path {
        &self.prefix
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str, options: &[(&str, OptionValue)]) -> Result<(Location, FetchOptions)> {
        let owned: Vec<(String, OptionValue)> = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Location::parse(url, &owned)
    }

    fn refusal(url: &str, options: &[(&str, OptionValue)]) -> String {
        match parse(url, options) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{url} opened with {options:?}"),
        }
    }

    #[test]
    fn typed_values_reach_object_store_as_its_strings() {
        let (loc, fetch) = parse(
            "http://127.0.0.1:1/s/",
            &[
                ("allow_http", OptionValue::Bool(true)),
                ("http2_max_frame_size", OptionValue::Int(1 << 16)),
                ("retries", OptionValue::Int(2)),
            ],
        )
        .unwrap();
        assert_eq!(loc.url(), "http://127.0.0.1:1/s");
        assert_eq!(
            loc.config,
            [
                ("allow_http".to_string(), "true".to_string()),
                ("http2_max_frame_size".into(), "65536".into()),
            ]
        );
        assert_eq!(fetch.retries, 2);
    }

    #[test]
    fn a_value_object_store_refuses_is_named_by_its_key() {
        let msg = refusal(
            "https://example.com/s",
            &[
                ("user_agent", OptionValue::Str("loaderx".into())),
                ("allow_http", OptionValue::Str("maybe".into())),
            ],
        );
        assert!(
            msg.starts_with(
                "https://example.com/s: storage option allow_http = \"maybe\" is refused: "
            ),
            "{msg}"
        );
        let msg = refusal("s3://b/s", &[("aws_regoin", OptionValue::Str("x".into()))]);
        assert!(
            msg.contains(r#"unknown storage option "aws_regoin""#),
            "{msg}"
        );
        let msg = refusal("s3://b/s", &[("Retries", OptionValue::Float(1.5))]);
        assert_eq!(
            msg,
            "storage option Retries must be a non-negative integer, got 1.5"
        );
    }
}
