//! Compiles the official `onnx.proto` into Rust messages for the `onnx` feature: protox parses
//! it (no system `protoc`), prost-build writes the types.

fn main() {
    #[cfg(feature = "onnx")]
    {
        println!("cargo:rerun-if-changed=proto/onnx.proto");
        let files = protox::compile(["proto/onnx.proto"], ["proto/"])
            .unwrap_or_else(|e| panic!("parsing proto/onnx.proto: {e}"));
        prost_build::Config::new()
            .compile_fds(files)
            .unwrap_or_else(|e| panic!("compiling proto/onnx.proto: {e}"));
    }
}
