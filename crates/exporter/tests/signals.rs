//! Signals sent to this test process arrive in the stream instead of killing it.

use std::process::Command;
use std::time::Duration;

use ioserve_exporter::signals::{OperatorSignal, OperatorSignals};

fn send(signal: &str) {
    let status = Command::new("kill")
        .args([signal, &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[test]
fn each_signal_arrives_by_name_and_only_term_and_int_stop() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut signals = OperatorSignals::install().unwrap();
        for (flag, expected) in [
            ("-HUP", OperatorSignal::Hangup),
            ("-USR1", OperatorSignal::User1),
            ("-USR2", OperatorSignal::User2),
            ("-INT", OperatorSignal::Interrupt),
            ("-TERM", OperatorSignal::Terminate),
        ] {
            send(flag);
            let got = tokio::time::timeout(Duration::from_secs(10), signals.recv())
                .await
                .unwrap_or_else(|_| panic!("{flag} did not arrive"));
            assert_eq!(got, expected);
            assert_eq!(got.name(), format!("SIG{}", &flag[1..]));
            assert_eq!(got.stops(), matches!(flag, "-INT" | "-TERM"));
        }
    });
}
