//! What the tests of this crate share: reviews written in the order kube-apiserver writes their
//! members, from the workspace's one copy of that helper.

// Its items are `pub` for the crate that exports them, `volume-health-tests`.
#[path = "../../../tests/src/apiserver_order.rs"]
#[allow(unreachable_pub)]
mod apiserver_order;

pub(crate) use apiserver_order::apiserver_order;
