//! Rebuilds the CLI when a template changes: `include_dir!` embeds `templates/`, but cargo does not
//! track the files it reads.

fn main() {
    println!("cargo:rerun-if-changed=templates");
}
