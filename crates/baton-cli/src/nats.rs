//! Connecting to NATS by the nats CLI's conventions: a comma-separated
//! server list, credentials in the URL or in flags, TLS, nkeys, and
//! unlimited reconnects. No secret reaches a message or a log line.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context as _, bail};
use async_nats::{ConnectOptions, ServerAddr};
use baton_nats::Connection;
use baton_ops::Role;
use clap::Args;

/// Connection settings, following the NATS CLI's environment variables.
#[derive(Debug, Clone, Args)]
pub struct NatsArgs {
    /// NATS server URL, or a comma-separated list of them (default nats://127.0.0.1:4222;
    /// `baton dev` starts its own server when unset). A URL may carry `user:password@` or
    /// `token@`; `tls://` requires TLS.
    #[arg(long, global = true, env = "NATS_URL", hide_env_values = true)]
    pub nats_url: Option<String>,

    /// NATS credentials file (JWT + nkey).
    #[arg(long, global = true, env = "NATS_CREDS")]
    pub creds: Option<PathBuf>,

    /// NATS user name (with --password).
    #[arg(long, global = true, env = "NATS_USER")]
    pub user: Option<String>,

    /// NATS password (with --user).
    #[arg(long, global = true, env = "NATS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    /// NATS authentication token.
    #[arg(long, global = true, env = "NATS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// NATS nkey seed file (a user seed, as `nk -gen user` writes).
    #[arg(long, global = true, env = "NATS_NKEY")]
    pub nkey: Option<PathBuf>,

    /// CA certificate (PEM) to verify the NATS server with; turns TLS on.
    #[arg(long, global = true, env = "NATS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for TLS client authentication, with --tls-key.
    #[arg(long, global = true, env = "NATS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of the client certificate, with --tls-cert.
    #[arg(long, global = true, env = "NATS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// Replicas of every stream and bucket Baton creates: 1 on a single server, 3 on a
    /// cluster. An existing stream with fewer is raised in place where the cluster allows.
    #[arg(long, global = true, env = "BATON_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub replicas: u8,

    /// Prefix of this process's reply subjects (default `_INBOX_<role>`, e.g.
    /// `_INBOX_worker_refund`); `baton permissions` grants only it.
    #[arg(long, global = true, env = "BATON_INBOX_PREFIX")]
    pub inbox_prefix: Option<String>,

    /// Subject prefix shared by every Baton process of one deployment.
    #[arg(long, global = true, env = "BATON_PREFIX", default_value = "baton")]
    pub prefix: String,
}

impl NatsArgs {
    /// Replicas of what Baton creates.
    pub fn replicas(&self) -> usize {
        usize::from(self.replicas)
    }

    /// The stream settings these arguments describe.
    pub fn streams(&self) -> baton_nats::StreamSettings {
        baton_nats::StreamSettings {
            replicas: self.replicas(),
            ..Default::default()
        }
    }
}

/// Where `baton` connects when neither `NATS_URL` nor `--nats-url` is set.
pub(crate) const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// A parsed server list, its credentials taken out of the URLs.
#[derive(Debug)]
pub(crate) struct Servers {
    addrs: Vec<ServerAddr>,
    /// `user:pass@` or `token@` from the URLs, when they carry one.
    auth: Option<UrlAuth>,
}

#[derive(Debug, PartialEq, Eq)]
enum UrlAuth {
    UserPassword(String, String),
    Token(String),
}

impl Servers {
    /// Reads a comma-separated list of server URLs (`nats://`, `tls://`,
    /// `ws://`, `wss://`, or `host:port`).
    pub(crate) fn parse(list: &str) -> anyhow::Result<Self> {
        let mut addrs = Vec::new();
        let mut auth = None;
        for (index, item) in list.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let number = index + 1;
            let addr = ServerAddr::from_str(item).map_err(|err| {
                // The url crate's message never quotes the input, so no secret leaks.
                anyhow::anyhow!(
                    "server {number} of the NATS server list is not a valid URL ({err}): \
                     give a comma-separated list such as nats://host-a:4222,nats://host-b:4222"
                )
            })?;
            let (addr, found) = strip_auth(addr)?;
            match (&auth, found) {
                (_, None) => {}
                (None, Some(found)) => auth = Some(found),
                (Some(seen), Some(found)) if *seen == found => {}
                (Some(_), Some(_)) => bail!(
                    "the NATS server list carries different credentials in different URLs: \
                     give them once, with --user/--password or --token"
                ),
            }
            addrs.push(addr);
        }
        if addrs.is_empty() {
            bail!("the NATS server list is empty: set NATS_URL or --nats-url to nats://host:4222");
        }
        Ok(Self { addrs, auth })
    }

    /// The list as it may be shown: no credentials.
    pub(crate) fn shown(&self) -> String {
        self.addrs
            .iter()
            .map(|addr| format!("{}://{}:{}", addr.scheme(), addr.host(), addr.port()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `addr` without its user info, and that user info.
fn strip_auth(addr: ServerAddr) -> anyhow::Result<(ServerAddr, Option<UrlAuth>)> {
    let mut url = addr.into_inner();
    let user = percent_decode(url.username());
    let password = url.password().map(percent_decode);
    let auth = match (user.is_empty(), password) {
        (true, None) => None,
        (false, None) => Some(UrlAuth::Token(user)),
        (_, Some(password)) => Some(UrlAuth::UserPassword(user, password)),
    };
    if auth.is_some() {
        // Setting these cannot fail on a URL that has a host, which every server URL has.
        let _ = url.set_username("");
        let _ = url.set_password(None);
    }
    let addr = ServerAddr::from_url(url).context("invalid NATS server URL")?;
    Ok((addr, auth))
}

/// Decodes `%XX` escapes (a password may hold `@` or `:` written as `%40`, `%3A`).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// The server list `list` (or the default) as it may be printed.
pub(crate) fn shown(list: Option<&str>) -> String {
    Servers::parse(list.unwrap_or(DEFAULT_URL)).map_or_else(
        |_| "(invalid NATS_URL)".to_owned(),
        |servers| servers.shown(),
    )
}

/// Connects to the servers `nats` names (or `url` when given), as `role`:
/// its connection name, and its own inbox prefix unless one is given.
pub(crate) async fn connect(
    nats: &NatsArgs,
    url: Option<&str>,
    role: &Role,
) -> anyhow::Result<Connection> {
    let list = url.or(nats.nats_url.as_deref()).unwrap_or(DEFAULT_URL);
    let servers = Servers::parse(list)?;
    let inbox = nats
        .inbox_prefix
        .clone()
        .unwrap_or_else(|| role.default_inbox_prefix());
    let options = options(nats, servers.auth.as_ref(), &role.connection_name())
        .await?
        .custom_inbox_prefix(inbox);
    let shown = servers.shown();
    Connection::connect(servers.addrs, options)
        .await
        .map_err(|err| {
            // The error may quote the server's answer, never our credentials.
            anyhow::anyhow!("{err}")
        })
        .with_context(|| {
            format!(
                "cannot connect to NATS at {shown}: start a server (`./just demo` runs one) or \
                 point NATS_URL / --nats-url at yours, and check the credentials and TLS settings"
            )
        })
}

/// The servers `nats` names, as `host:port`, without credentials.
pub(crate) fn listed(nats: &NatsArgs) -> anyhow::Result<Vec<String>> {
    let servers = Servers::parse(nats.nats_url.as_deref().unwrap_or(DEFAULT_URL))?;
    Ok(servers
        .addrs
        .iter()
        .map(|addr| format!("{}:{}", addr.host(), addr.port()))
        .collect())
}

/// What the one server at `addr` (`host:port`) says about itself, asked
/// with the credentials and TLS settings of `nats`.
pub(crate) async fn probe(
    nats: &NatsArgs,
    addr: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<async_nats::ServerInfo> {
    let servers = Servers::parse(nats.nats_url.as_deref().unwrap_or(DEFAULT_URL))?;
    let addr = ServerAddr::from_str(addr).context("invalid server address")?;
    let client = connect_once(nats, vec![addr], servers.auth.as_ref(), timeout).await?;
    Ok(client.server_info())
}

/// A plain client for the servers of `list`, with the credentials it
/// carries (else those of `nats`) and the TLS settings of `nats`.
pub(crate) async fn connect_list(
    nats: &NatsArgs,
    list: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<async_nats::Client> {
    let servers = Servers::parse(list)?;
    let shown = servers.shown();
    let mut nats = nats.clone();
    if servers.auth.is_some() {
        // The URL's user is the one asked for, not the main connection's.
        (nats.user, nats.password, nats.token) = (None, None, None);
        (nats.creds, nats.nkey) = (None, None);
    }
    connect_once(&nats, servers.addrs, servers.auth.as_ref(), timeout)
        .await
        .with_context(|| format!("cannot connect to {shown}"))
}

async fn connect_once(
    nats: &NatsArgs,
    addrs: Vec<ServerAddr>,
    auth: Option<&UrlAuth>,
    timeout: std::time::Duration,
) -> anyhow::Result<async_nats::Client> {
    let options = options(nats, auth, "baton doctor")
        .await?
        .max_reconnects(Some(1));
    tokio::time::timeout(timeout, options.connect(addrs))
        .await
        .context("no answer")?
        // The error may quote the server's answer, never our credentials.
        .map_err(|err| anyhow::anyhow!("{err}"))
}

/// The connect options of `nats`: credentials, TLS and reconnects.
async fn options(
    nats: &NatsArgs,
    from_url: Option<&UrlAuth>,
    name: &str,
) -> anyhow::Result<ConnectOptions> {
    // Unlimited reconnects (async-nats' default); events are logged by `Connection`.
    let mut options = ConnectOptions::new().name(name).max_reconnects(None);
    if let Some(creds) = &nats.creds {
        options = options
            .credentials_file(creds)
            .await
            .with_context(|| format!("cannot read NATS credentials file {}", creds.display()))?;
    }
    if let Some(path) = &nats.nkey {
        options = options.nkey(read_seed(path)?);
    }
    match (&nats.user, &nats.password) {
        (Some(user), Some(password)) => {
            options = options.user_and_password(user.clone(), password.clone());
        }
        (Some(_), None) | (None, Some(_)) => {
            bail!("set both NATS_USER and NATS_PASSWORD (or --user and --password)")
        }
        (None, None) => match from_url {
            Some(UrlAuth::UserPassword(user, password)) if nats.token.is_none() => {
                options = options.user_and_password(user.clone(), password.clone());
            }
            Some(UrlAuth::Token(token)) if nats.token.is_none() => {
                options = options.token(token.clone());
            }
            _ => {}
        },
    }
    if let Some(token) = &nats.token {
        options = options.token(token.clone());
    }
    tls(options, nats)
}

/// The TLS settings of `nats`; any of them turns TLS on.
fn tls(mut options: ConnectOptions, nats: &NatsArgs) -> anyhow::Result<ConnectOptions> {
    for path in [&nats.tls_ca, &nats.tls_cert, &nats.tls_key]
        .into_iter()
        .flatten()
    {
        if !path.is_file() {
            bail!(
                "TLS file {} does not exist or is not a file",
                path.display()
            );
        }
    }
    if let Some(ca) = &nats.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    match (&nats.tls_cert, &nats.tls_key) {
        (Some(cert), Some(key)) => {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        (Some(_), None) | (None, Some(_)) => {
            bail!(
                "a client certificate needs both --tls-cert and --tls-key (NATS_CERT and NATS_KEY)"
            )
        }
        (None, None) => {}
    }
    Ok(options)
}

/// The user seed of an nkey seed file (its first line starting with `SU`).
fn read_seed(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read nkey seed file {}", path.display()))?;
    let seed = text
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("SU"))
        .with_context(|| {
            format!(
                "nkey seed file {} holds no user seed (a line starting with SU, as `nk -gen user` writes)",
                path.display()
            )
        })?;
    nkeys::KeyPair::from_seed(seed).map_err(|_| {
        anyhow::anyhow!(
            "nkey seed file {} holds an invalid user seed",
            path.display()
        )
    })?;
    Ok(seed.to_owned())
}

/// A Baton client of the deployment, connected as `kind` (client or
/// operator), that creates missing streams with the deployment's replicas.
pub(crate) async fn client(
    nats: &NatsArgs,
    subjects: baton_proto::Subjects,
    kind: baton_ops::RoleKind,
) -> anyhow::Result<baton_client::Client> {
    let connection = connect(nats, None, &Role::of(kind)).await?;
    Ok(baton_client::Client::new(connection, subjects).with_streams(nats.streams()))
}

/// Connects to the server the user named, or starts a private local one
/// (kept running while the returned handle lives) when none is named.
pub(crate) async fn connect_or_start(
    nats: &NatsArgs,
    role: &Role,
) -> anyhow::Result<(Connection, Option<baton_nats_server::NatsServer>)> {
    connect_or_start_with(nats, role, baton_nats_server::ServerOptions::default()).await
}

/// [`connect_or_start`], starting the local server with `options`.
pub(crate) async fn connect_or_start_with(
    nats: &NatsArgs,
    role: &Role,
    options: baton_nats_server::ServerOptions,
) -> anyhow::Result<(Connection, Option<baton_nats_server::NatsServer>)> {
    let server = match &nats.nats_url {
        Some(_) => None,
        None => Some(
            tokio::task::spawn_blocking(move || baton_nats_server::NatsServer::start_with(options))
                .await
                .context("server start-up task failed")??,
        ),
    };
    let url = server.as_ref().map(|s| s.url().to_owned());
    let connection = connect(nats, url.as_deref(), role).await?;
    Ok((connection, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_comma_separated_list() {
        let servers = Servers::parse("nats://a:4222, b:4223,tls://c").expect("valid");
        assert_eq!(servers.shown(), "nats://a:4222,nats://b:4223,tls://c:4222");
        assert_eq!(servers.auth, None);
    }

    #[test]
    fn takes_credentials_out_of_the_urls() {
        let servers = Servers::parse("nats://alice:s%40cret@a:4222,nats://alice:s%40cret@b:4222")
            .expect("valid");
        assert_eq!(
            servers.auth,
            Some(UrlAuth::UserPassword("alice".into(), "s@cret".into()))
        );
        assert!(!servers.shown().contains("cret"), "{}", servers.shown());
        for addr in &servers.addrs {
            assert!(!addr.has_user_pass());
        }
        let token = Servers::parse("nats://t0ken@a:4222").expect("valid");
        assert_eq!(token.auth, Some(UrlAuth::Token("t0ken".into())));
    }

    #[test]
    fn refuses_mixed_credentials_and_bad_urls_without_printing_them() {
        let err = Servers::parse("nats://u:one@a,nats://u:two@b").expect_err("mixed");
        assert!(!format!("{err:#}").contains("one"), "{err:#}");
        let err = Servers::parse("nats://u:hunter2@a:99999").expect_err("bad port");
        let text = format!("{err:#}");
        assert!(text.contains("server 1"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(Servers::parse(" , ").is_err());
    }
}
