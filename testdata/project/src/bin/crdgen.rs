// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! Prints the CustomResourceDefinition of every API of the project as a JSON `List`.
//!
//! `make manifests` turns the output into `config/crd/bases/*.yaml`; `kubectl apply -f -` accepts it as is.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use kube::CustomResourceExt;
use project::api;
// +rustbuilder:scaffold:imports

fn main() {
    let crds: Vec<CustomResourceDefinition> = vec![
        api::v1alpha1::Memcached::crd(),
        // +rustbuilder:scaffold:crds
    ];
    let list = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": crds });
    let json = serde_json::to_string_pretty(&list).expect("CRDs serialize to JSON");
    println!("{json}");
}
