//! SIGTERM cancels the shutdown token instead of killing the process. This file is its own test
//! binary so the signal cannot reach any other test.

use std::time::Duration;

#[tokio::test]
async fn sigterm_cancels_the_shutdown_token() {
    let token = tink_runtime::shutdown_token();
    // Let the spawned task install its handlers before the signal is sent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!token.is_cancelled());
    let status = tokio::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .await
        .expect("run kill");
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(10), token.cancelled())
        .await
        .expect("token cancelled by SIGTERM");
}
