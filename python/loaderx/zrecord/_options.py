"""The names and value types of ``storage_options``.

loaderx's own options (how records are fetched) come first; the rest are the
``object_store`` crate's configuration keys for S3, Google Cloud Storage, Azure
and the HTTP client, aliases included, as that crate spells them. Values are
passed to the native side as given: numbers and booleans as such, and strings
as ``object_store`` takes them. The native side refuses, naming the key, a name
that the URL's kind of store does not know and a value that does not fit."""

from __future__ import annotations

from typing import TypedDict

_Flag = bool | str
_Count = int | str
_Seconds = int | float | str


class StorageOptions(TypedDict, total=False):
    """Options of a store URL; every key is optional (docs/remote.md)."""

    # loaderx: how records are fetched (``loaderx._native.LOADERX_STORAGE_OPTIONS``).
    from_env: _Flag
    max_concurrency: _Count
    coalesce_gap: _Count
    max_request_bytes: _Count
    retries: _Count
    retry_backoff: _Seconds
    request_timeout: _Seconds
    index_memory_bytes: _Count
    first_byte_timeout: _Seconds
    deadline: _Seconds
    read_ahead_bytes: _Count

    # object_store's HTTP client, for every kind of store but file://.
    allow_http: _Flag
    allow_invalid_certificates: _Flag
    disable_system_certificates: _Flag
    connect_timeout: str
    default_content_type: str
    http1_only: _Flag
    http2_only: _Flag
    http2_keep_alive_interval: str
    http2_keep_alive_timeout: str
    http2_keep_alive_while_idle: _Flag
    http2_max_frame_size: _Count
    pool_idle_timeout: str
    pool_max_idle_per_host: _Count
    proxy_url: str
    proxy_ca_certificate: str
    proxy_excludes: str
    randomize_addresses: _Flag
    read_timeout: str
    timeout: str
    user_agent: str

    # Amazon S3 and S3-compatible servers.
    aws_access_key_id: str
    access_key_id: str
    aws_secret_access_key: str
    secret_access_key: str
    aws_default_region: str
    default_region: str
    aws_region: str
    region: str
    aws_bucket: str
    aws_bucket_name: str
    aws_endpoint_url: str
    aws_endpoint: str
    endpoint_url: str
    aws_endpoint_url_s3: str
    aws_session_token: str
    aws_token: str
    session_token: str
    aws_virtual_hosted_style_request: _Flag
    virtual_hosted_style_request: _Flag
    aws_s3_express: _Flag
    s3_express: _Flag
    aws_imdsv1_fallback: _Flag
    imdsv1_fallback: _Flag
    aws_metadata_endpoint: str
    metadata_endpoint: str
    aws_unsigned_payload: _Flag
    unsigned_payload: _Flag
    aws_checksum_algorithm: str
    checksum_algorithm: str
    aws_container_credentials_relative_uri: str
    container_credentials_relative_uri: str
    aws_container_credentials_full_uri: str
    container_credentials_full_uri: str
    aws_container_authorization_token_file: str
    container_authorization_token_file: str
    aws_web_identity_token_file: str
    web_identity_token_file: str
    aws_role_arn: str
    role_arn: str
    aws_role_session_name: str
    role_session_name: str
    aws_endpoint_url_sts: str
    endpoint_url_sts: str
    aws_skip_signature: _Flag
    aws_copy_if_not_exists: str
    copy_if_not_exists: str
    aws_conditional_put: str
    conditional_put: str
    aws_disable_tagging: _Flag
    aws_disable_bulk_delete: _Flag
    disable_bulk_delete: _Flag
    aws_request_payer: _Flag
    request_payer: _Flag
    aws_allow_http: _Flag
    aws_server_side_encryption: str
    server_side_encryption: str
    aws_sse_kms_key_id: str
    sse_kms_key_id: str
    aws_sse_bucket_key_enabled: _Flag
    sse_bucket_key_enabled: _Flag
    aws_sse_customer_key_base64: str
    sse_customer_key_base64: str

    # Google Cloud Storage.
    google_service_account: str
    service_account: str
    google_service_account_path: str
    service_account_path: str
    google_service_account_key: str
    service_account_key: str
    google_bucket: str
    google_bucket_name: str
    google_base_url: str
    base_url: str
    google_application_credentials: str
    application_credentials: str
    google_bearer_token: str
    google_skip_signature: _Flag

    # Azure Blob Storage.
    azure_storage_account_key: str
    azure_storage_access_key: str
    azure_storage_master_key: str
    master_key: str
    account_key: str
    access_key: str
    azure_storage_account_name: str
    account_name: str
    azure_storage_client_id: str
    azure_client_id: str
    client_id: str
    azure_storage_client_secret: str
    azure_client_secret: str
    client_secret: str
    azure_storage_tenant_id: str
    azure_storage_authority_id: str
    azure_tenant_id: str
    azure_authority_id: str
    tenant_id: str
    authority_id: str
    azure_storage_authority_host: str
    azure_authority_host: str
    authority_host: str
    azure_storage_sas_key: str
    azure_storage_sas_token: str
    sas_key: str
    sas_token: str
    azure_storage_token: str
    azure_storage_use_emulator: _Flag
    use_emulator: _Flag
    azure_storage_endpoint: str
    azure_endpoint: str
    azure_msi_endpoint: str
    azure_identity_endpoint: str
    identity_endpoint: str
    msi_endpoint: str
    azure_object_id: str
    object_id: str
    azure_msi_resource_id: str
    msi_resource_id: str
    azure_federated_token_file: str
    federated_token_file: str
    azure_use_fabric_endpoint: _Flag
    use_fabric_endpoint: _Flag
    azure_use_azure_cli: _Flag
    use_azure_cli: _Flag
    azure_skip_signature: _Flag
    azure_container_name: str
    container_name: str
    azure_disable_tagging: _Flag
    azure_fabric_token_service_url: str
    fabric_token_service_url: str
    azure_fabric_workload_host: str
    fabric_workload_host: str
    azure_fabric_session_token: str
    fabric_session_token: str
    azure_fabric_cluster_identifier: str
    fabric_cluster_identifier: str
    azure_credential_type: str
    credential_type: str
    azure_storage_encryption_key: str
    encryption_key: str
    azure_allow_http: _Flag

    # Names several kinds of store share (each store reads its own meaning).
    bucket: str
    bucket_name: str
    endpoint: str
    token: str
    bearer_token: str
    skip_signature: _Flag
    disable_tagging: _Flag
