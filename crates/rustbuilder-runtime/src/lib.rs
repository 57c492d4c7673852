//! rustbuilder-runtime: what every operator shares.
