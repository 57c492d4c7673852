//! What each command generates. `rust` is the base plugin (`init`, `create api`); `deploy_image` adds a
//! complete controller that runs a container image as a Deployment.

pub mod deploy_image;
pub mod rust;
