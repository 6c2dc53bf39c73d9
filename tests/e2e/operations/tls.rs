//! Connecting by the nats CLI's conventions to servers that require TLS
//! with client certificates, or nkeys: a session runs end to end, and a
//! missing or wrong credential is a clear error that prints no secret.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use baton_testkit::{ChildProcess, NatsServer, ServerOptions, baton_binary, eventually};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};

/// A server started with `config` (written next to the other files in `dir`).
async fn server(dir: &Path, config: &str) -> anyhow::Result<NatsServer> {
    let path = dir.join("server.conf");
    std::fs::write(&path, config)?;
    let options = ServerOptions::default().arg("-c").arg(path);
    Ok(tokio::task::spawn_blocking(move || NatsServer::start_with(options)).await??)
}

fn baton(url: &str, auth: &[&str], args: &[&str]) -> Command {
    let mut command = Command::new(baton_binary());
    command
        .args(["--nats-url", url])
        .args(auth)
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("NATS_URL");
    command
}

/// Starts a relay worker `echo` and sends it one task with `--wait`.
async fn one_session(url: &str, auth: &[&str]) -> anyhow::Result<Output> {
    let worker = ChildProcess::spawn(baton(url, auth, &["worker", "echo", "--relay"]), "echo")?;
    eventually(Duration::from_secs(30), || {
        let log = worker.output();
        std::future::ready(if log.contains("worker started") {
            Ok(())
        } else {
            Err(anyhow::anyhow!("worker not started:\n{log}"))
        })
    })
    .await?;
    let sent = tokio::task::block_in_place(|| {
        baton(
            url,
            auth,
            &["send", "--to", "echo", "--direct", "--wait", "hello"],
        )
        .output()
    })?;
    Ok(sent)
}

fn run(url: &str, auth: &[&str]) -> anyhow::Result<Output> {
    Ok(tokio::task::block_in_place(|| {
        baton(url, auth, &["dlq", "ls"]).output()
    })?)
}

/// A CA, and a server and a client certificate it signed, as PEM files in `dir`.
fn certificates(dir: &Path) -> anyhow::Result<()> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    for (name, purpose) in [
        ("server", ExtendedKeyUsagePurpose::ServerAuth),
        ("client", ExtendedKeyUsagePurpose::ClientAuth),
    ] {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem())?;
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem())?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_with_client_certificates_runs_a_session() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    certificates(dir.path())?;
    let file = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let config = format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        file("server.pem"),
        file("server-key.pem"),
        file("ca.pem")
    );
    let server = server(dir.path(), &config).await?;
    let url = server.url().replacen("nats://", "tls://", 1);
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client-key.pem"));
    let auth = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let sent = one_session(&url, &auth).await?;
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    // Without the client certificate the server refuses the connection.
    let refused = run(&url, &["--tls-ca", &ca])?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("cannot connect to NATS at tls://127.0.0.1:"),
        "{stderr}"
    );
    // Half a client certificate is a configuration error that names the fix.
    let half = run(&url, &["--tls-ca", &ca, "--tls-cert", &cert])?;
    let stderr = String::from_utf8_lossy(&half.stderr);
    assert!(
        stderr.contains("needs both --tls-cert and --tls-key"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_nkey_seed_file_runs_a_session_and_a_wrong_one_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let user = nkeys::KeyPair::new_user();
    let config = format!(
        "authorization {{\n  users: [ {{ nkey: \"{}\" }} ]\n}}\n",
        user.public_key()
    );
    let server = server(dir.path(), &config).await?;
    let seed = user.seed()?;
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, format!("{seed}\n"))?;
    let seed_path = seed_file.to_string_lossy().into_owned();
    let sent = one_session(server.url(), &["--nkey", &seed_path]).await?;
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    // Another user's seed is refused, and the message prints no seed.
    let stranger = nkeys::KeyPair::new_user().seed()?;
    let stranger_file = dir.path().join("stranger.nk");
    std::fs::write(&stranger_file, &stranger)?;
    let refused = run(server.url(), &["--nkey", &stranger_file.to_string_lossy()])?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("cannot connect to NATS"), "{stderr}");
    assert!(
        !stderr.contains(&stranger) && !stderr.contains(&seed),
        "{stderr}"
    );
    // A file with no user seed names what it should hold.
    let empty = dir.path().join("empty.nk");
    std::fs::write(&empty, "not a seed\n")?;
    let bad = run(server.url(), &["--nkey", &empty.to_string_lossy()])?;
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("holds no user seed"), "{stderr}");
    Ok(())
}
