//! Offline checks of the deployment manifests under `manifests/`.
//!
//! Every kustomization is rendered with `kubectl kustomize` (kubectl is required; the
//! tests fail without it) and checked for what an operator relies on: the server's
//! routes, ports and flags line up with the Service, probes and webhook configurations,
//! every gated resource is covered, the webhooks' own namespace is excluded, and the pods
//! run restricted. Every `matchConditions` expression is evaluated with a CEL interpreter
//! against sample requests shaped as the kube-apiserver presents them, for the admission
//! webhooks and for the authorizer. The apiserver-side files of the authorizer (its
//! AuthorizationConfiguration, kubeconfig, static pod and kubeadm fragment) are checked
//! against each other.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use support::apiserver::{
    ACCESS_REVIEW_FIELDS, ADMISSION_REQUEST_FIELDS, AccessReview, AdmissionRequest, Dispatch,
    ResourceAttributes, Role, authorizer_sends, dispatch, identifiers, namespace_labels,
    rules_match, selector_matches,
};
use support::server::{
    AUTHORIZE_PATH, LIVENESS_PATH, MUTATE_PATH, PROPAGATION, READINESS_PATH, ServerFlags,
    VALIDATE_PATH, parse_duration,
};
use support::{
    AUDIT_COMPONENTS, COMPONENTS, INSTALLABLE, KUSTOMIZATIONS, NAMESPACE, PROVIDED_CERT_FILES,
    PROVIDED_CERTS, Rendered, STATIC_INSTALLS, UNDOING_COMPONENTS, VOLUME_HEALTH_OFF, WARN,
    array_at, component_dirs, kustomization_dirs, manifests_dir, read_manifest,
    read_single_manifest, render_operator_overlay, render_with_components, rendered, rendering,
    str_at, strings_at, switched,
};

mod audit;
mod authorizer;
mod client_certificates;
mod components;
mod configurations;
mod deployment;
mod enforcement;
mod installs;
mod match_conditions;
mod ports;
mod rendering;

// The sections share their helpers through the crate root.
use authorizer::*;
use configurations::*;
use deployment::*;
use match_conditions::*;
