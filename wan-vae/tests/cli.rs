//! The `wan-vae` program refuses bad input with a message naming the argument and what was
//! expected, and exit status 2, before any decoding.

use std::process::Command;

/// Runs the program on the CPU runtime with `args` (nothing written, no second decode) and
/// returns its exit status and standard error.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wan-vae"))
        .args([
            "--device",
            "cpu",
            "--no-write",
            "--no-check",
            "--no-profile",
        ])
        .args(args)
        .output()
        .expect("run wan-vae");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("wan_cli_{}_{name}", std::process::id()));
    std::fs::write(&path, bytes).expect("temp file");
    path
}

#[track_caller]
fn refused(args: &[&str], expected: &[&str]) {
    let (code, stderr) = run(args);
    assert_eq!(
        code,
        Some(2),
        "{args:?} must fail with status 2; stderr: {stderr}"
    );
    for want in expected {
        assert!(stderr.contains(want), "{args:?}: `{want}` not in: {stderr}");
    }
}

#[test]
fn bad_arguments_are_refused_by_name() {
    refused(&["--frames", "0"], &["--frames", "0"]);
    refused(&["--height=-3"], &["--height", "-3"]);
    refused(&["--raw-latent"], &["--latent"]);
    refused(&["--dtype", "f8"], &["--dtype", "f8"]);
    refused(&["--precision", "fp4"], &["--precision", "fp4"]);
    refused(
        &["--weights", "/nonexistent/vae.safetensors"],
        &["/nonexistent/vae.safetensors"],
    );
}

#[test]
fn bad_files_are_refused_by_name() {
    let table = temp_file("table.txt", b"96 96 3 3 3 many spec_tma 1.0 1.0\n");
    let shown = table.display().to_string();
    refused(&["--conv-table", &shown], &["--conv-table", &shown, "many"]);
    std::fs::remove_file(&table).ok();

    let latent = temp_file("latent.safetensors", b"not a safetensors file");
    let shown = latent.display().to_string();
    refused(
        &["--latent", &shown],
        &["--latent", &shown, "not a safetensors file"],
    );
    std::fs::remove_file(&latent).ok();

    // A latent of 3 channels for a decoder of z_dim 4 (the small random one).
    let z: Vec<u8> = [0f32; 3 * 2 * 2]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1, 3, 1, 2, 2], &z)
            .expect("tensor view");
    let bytes = safetensors::serialize([("z", view)], None).expect("serialize");
    let latent = temp_file("z3.safetensors", &bytes);
    let shown = latent.display().to_string();
    refused(
        &["--latent", &shown, "--raw-latent"],
        &["--latent has 3 channels", "z_dim = 4"],
    );
    std::fs::remove_file(&latent).ok();
}
