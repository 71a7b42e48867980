//! Keeps `generated/` what `proto/modal.proto` generates: protox compiles the .proto into a
//! `FileDescriptorSet` (no protoc), prost-build writes the messages from it, and [`Paths`]
//! writes the service's RPC paths. The test fails when a committed file differs;
//! `SANDGUARD_REGENERATE_PROTO=1 cargo test --lib modal::codegen` writes them instead.
//!
//! A test rather than a build script, so that only test builds compile protox and prost-build
//! (why: [`super::wire`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use prost_build::{Config, Module, Service, ServiceGenerator};

/// The line above prost-build's own `@generated` one.
const HEADER: &str = "// From proto/modal.proto by src/providers/modal/codegen.rs. Do not edit: change the \
                      .proto, then\n// run `SANDGUARD_REGENERATE_PROTO=1 cargo test --lib modal::codegen`.\n";

/// A service as `pub mod path`: `SERVICE`, then one `&str` constant per RPC, named after the
/// method in upper snake case (`SandboxListV2` is `SANDBOX_LIST_V2`), holding the path gRPC
/// sends (`/modal.client.ModalClient/SandboxListV2`). One service per package, as Modal has.
struct Paths;

impl ServiceGenerator for Paths {
    fn generate(&mut self, service: Service, buf: &mut String) {
        let full = format!("{}.{}", service.package, service.proto_name);
        // Writing to a String cannot fail.
        let _ = writeln!(buf, "/// The RPC paths of `{full}`, as gRPC sends them.");
        let _ = writeln!(buf, "pub mod path {{");
        let _ = writeln!(buf, "    pub const SERVICE: &str = \"{full}\";");
        for method in &service.methods {
            method.comments.append_with_indent(1, buf);
            let _ = writeln!(
                buf,
                "    pub const {}: &str = \"/{full}/{}\";",
                method.name.to_uppercase(),
                method.proto_name
            );
        }
        buf.push_str("}\n");
    }
}

/// Every generated file's name (`modal.client.rs`) and text.
fn generate(root: &Path) -> Vec<(String, String)> {
    let descriptors = protox::Compiler::new([root.join("proto")])
        .and_then(|mut c| {
            c.include_imports(true).include_source_info(true);
            c.open_file("modal.proto")?;
            Ok(c.file_descriptor_set())
        })
        .unwrap_or_else(|e| panic!("proto/modal.proto does not compile: {e:?}"));
    let requests = descriptors
        .file
        .into_iter()
        .map(|file| (Module::from_protobuf_package_name(file.package()), file))
        .collect();
    let modules = Config::new()
        .compile_well_known_types()
        .service_generator(Box::new(Paths))
        .generate(requests)
        .unwrap_or_else(|e| panic!("prost-build cannot generate proto/modal.proto: {e}"));
    let mut files: Vec<(String, String)> = modules
        .into_iter()
        .map(|(module, code)| (module.to_file_name_or("_"), format!("{HEADER}{code}")))
        .collect();
    files.sort();
    files
}

#[test]
fn the_generated_code_is_what_the_proto_generates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("src/providers/modal/generated");
    let files = generate(root);
    if std::env::var_os("SANDGUARD_REGENERATE_PROTO").is_some() {
        for (name, text) in &files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }
    let stale: Vec<&str> = files
        .iter()
        .filter(|(name, text)| std::fs::read_to_string(dir.join(name)).ok().as_ref() != Some(text))
        .map(|(name, _)| name.as_str())
        .collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let wanted: BTreeSet<String> = files.iter().map(|(name, _)| name.clone()).collect();
    assert!(
        stale.is_empty() && present == wanted,
        "src/providers/modal/generated/ is not what proto/modal.proto generates (differs: \
         {stale:?}; present: {present:?}, generated: {wanted:?}); run \
         `SANDGUARD_REGENERATE_PROTO=1 cargo test --lib modal::codegen`"
    );
}
