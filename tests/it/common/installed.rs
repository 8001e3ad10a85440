//! Where `bash tests/run.sh` installed the real clients and tool servers:
//! the Python venv and the npm project under tests/clients. A test that needs
//! them and finds them missing fails, saying how to install them; it never
//! passes silently.

use std::path::{Path, PathBuf};

pub fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

pub fn not_installed(what: &str, var: &str, tried: &Path) -> ! {
    panic!(
        "\n\n*** The {what} client tests need what `bash tests/run.sh` installs. ***\n\
         ${var} is not set and {} does not exist.\n\
         Run `bash tests/run.sh` once (it installs the clients, then runs every test),\n\
         or set {var}.\n",
        tried.display()
    )
}

/// The venv's python (from run.sh, else the default venv if installed).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CLIENT_TESTS_PYTHON") {
        return PathBuf::from(p);
    }
    let default = clients_dir().join(".venv/bin/python");
    if !default.exists() {
        not_installed("Python", "CLIENT_TESTS_PYTHON", &default);
    }
    default
}

/// The npm project holding `node_modules` (the openai SDK, the MCP test
/// server) and `clients.mjs`.
pub fn node_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("CLIENT_TESTS_NODE_DIR") {
        return PathBuf::from(p);
    }
    let default = clients_dir().join("node");
    let sdk = default.join("node_modules/openai/package.json");
    if !sdk.exists() {
        not_installed("Node", "CLIENT_TESTS_NODE_DIR", &sdk);
    }
    default
}
