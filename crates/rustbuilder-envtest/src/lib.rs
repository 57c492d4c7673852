//! rustbuilder-envtest: a real control plane for tests.
