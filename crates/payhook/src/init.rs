//! `payhook init PROVIDER…`: a commented starter configuration with one source per provider, and beside it an
//! environment file holding a fresh API token and a line to fill in for each secret. Secrets never go into the
//! configuration file, which can then be kept in version control or a ConfigMap.

use crate::UsageError;
use anyhow::{Context, Result};
use clap::Args;
use payhook::config::BUILT_IN_SCHEMES;
use payhook_core::format::Format;
use payhook_core::preset::Preset;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The providers to receive webhooks from, one source each: a built-in scheme (stripe, paystack, shopify,
    /// adyen, braintree, github, standard-webhooks, http-message-signatures, hmac) or a preset (paddle, square, …);
    /// an unknown name lists them all.
    #[arg(required = true, value_name = "PROVIDER")]
    pub providers: Vec<String>,
    /// Where to write the configuration (default: --config, else ./payhook.toml).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Where to write the API token and the secrets' variables (default: the configuration's name with `.env`,
    /// beside it: payhook.env).
    #[arg(long, value_name = "PATH")]
    pub env_file: Option<PathBuf>,
    /// The address payhook listens on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The database: sqlite://PATH (relative to the working directory) or sqlite:///absolute/path.
    #[arg(long, default_value = "sqlite://payhook.db")]
    pub storage_url: String,
}

/// One provider as `init` writes it.
#[derive(Debug)]
struct Provider {
    /// The source's name (the URL's last segment), the scheme's and usually the format's.
    name: String,
    format: String,
    /// The environment variable holding its webhook secrets.
    secrets_env: String,
    /// What a reader needs: who it is, where its secret is found, where the order id travels.
    about: Vec<String>,
    /// Lines written after `scheme`: the keys of the `hmac` scheme.
    scheme_keys: Vec<String>,
    /// Lines written after `secrets_env`: Mercado Pago's confirmation from its API.
    source_keys: Vec<String>,
    /// Other variables the source reads (`confirm_token_env`), with what each holds.
    more_env: Vec<(String, String)>,
}

/// The providers `init` knows, in the order of the error message: the built-in schemes, then the presets that sign.
fn known() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BUILT_IN_SCHEMES.to_vec();
    for name in Preset::names() {
        let signs = Preset::get(name).and_then(Result::ok).is_some_and(|p| p.signature.is_some());
        if signs && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

fn provider(name: &str) -> Result<Provider> {
    let preset = Preset::get(name).transpose().with_context(|| format!("the {name} preset does not parse"))?;
    let built_in = BUILT_IN_SCHEMES.contains(&name);
    let preset_signs = preset.as_ref().is_some_and(|p| p.signature.is_some());
    if !built_in && !preset_signs {
        return Err(UsageError(format!("unknown provider {name:?}; known providers: {}", known().join(", "))).into());
    }
    let format = if Format::built_in(name).is_some() || preset.as_ref().is_some_and(|p| p.format.is_some()) {
        name.to_owned()
    } else {
        "generic".to_owned()
    };
    let upper = name.to_ascii_uppercase().replace('-', "_");
    let secrets_env = format!("{upper}_WEBHOOK_SECRET");
    let about = match (&preset, name) {
        (_, "adyen") => vec![
            "Adyen: notifications of payments, refunds and chargebacks; payhook answers [accepted]".into(),
            "Secret: Customer Area > Developers > Webhooks > your webhook > HMAC key (hex)".into(),
            "Order id: merchantReference".into(),
        ],
        (_, "braintree") => vec![
            "Braintree: transaction and subscription notifications (no refund webhook)".into(),
            "Secret: PUBLIC_KEY:PRIVATE_KEY, the API key pair (the public key names the pair that signed)".into(),
            "Order id: the transaction's order-id".into(),
        ],
        (_, "http-message-signatures") => vec![
            "RFC 9421 HTTP Message Signatures (with an RFC 9530 Content-Digest)".into(),
            "Secret: hmac-sha256:<keyid>:<base64 key> or ed25519:<keyid>:<base64 public key>, comma-separated".into(),
            "Order id: data.order_id in payhook's generic format".into(),
        ],
        (_, "hmac") => vec![
            "A generic HMAC signer: HMAC-SHA256 of the body, hex, in the header below".into(),
            "Secret: the shared key, as the sender uses it".into(),
            "Order id: data.order_id in payhook's generic format".into(),
        ],
        (Some(p), _) => vec![
            format!("{}: {}", p.description, p.docs),
            format!("Secret: {}", p.secret),
            format!("Order id: {}", p.order_id),
        ],
        (None, _) => vec![name.to_owned()],
    };
    let mut scheme_keys = Vec::new();
    let mut source_keys = Vec::new();
    let mut more_env = Vec::new();
    if name == "hmac" {
        scheme_keys.push("header = \"X-Webhook-Signature\"    # the header the sender puts the signature in".into());
        scheme_keys.push("algorithm = \"sha256\"                # or sha512, sha1".into());
        scheme_keys.push("encoding = \"hex\"                    # or base64".into());
    }
    if preset.as_ref().is_some_and(|p| p.confirm.is_some()) {
        let var = format!("{upper}_ACCESS_TOKEN");
        source_keys.extend([
            "# Its signature does not cover the body: payhook reads each delivery's effect from the".to_owned(),
            "# provider's API, with the account's access token.".to_owned(),
            "confirm = \"api\"".to_owned(),
            format!("confirm_token_env = \"{var}\""),
        ]);
        more_env.push((var, "the account's access token, for its API".to_owned()));
    }
    Ok(Provider { name: name.to_owned(), format, secrets_env, about, scheme_keys, source_keys, more_env })
}

/// The configuration file's text.
fn config_text(providers: &[Provider], args: &InitArgs, env_file: &Path) -> String {
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    let env_name = env_file.file_name().map_or_else(|| env_file.display().to_string(), |n| n.to_string_lossy().into());
    let mut out = String::new();
    let _ = write!(
        out,
        r#"# payhook's configuration, written by `payhook init {names}` (payhook {version}).
# Every key left out has its documented default: `payhook config print-default` prints them with their meaning,
# and `payhook --config FILE config check` checks this file.
#
# No secret is written here. The API token and each provider's webhook secret are read from the environment;
# {env_name} holds them (systemd: EnvironmentFile=; podman and docker: --env-file; a shell: set -a; . ./{env_name}; set +a).

[server]
# Where payhook listens. Providers reach it through your HTTPS reverse proxy (or [server.tls], docs/operations.md).
listen = "{listen}"
# The bearer token of the /v1 API and of the dashboard's login (at least 24 characters).
api_token_env = "PAYHOOK_API_TOKEN"

[storage]
# The embedded SQLite database. Several instances share one PostgreSQL database instead: give
# postgres://USER:PASSWORD@HOST:5432/DATABASE, preferably in the environment as PAYHOOK_STORAGE__URL.
url = "{storage}"
"#,
        names = names.join(" "),
        version = env!("CARGO_PKG_VERSION"),
        listen = args.listen,
        storage = toml_escape(&args.storage_url),
    );
    for p in providers {
        out.push('\n');
        for line in &p.about {
            let _ = writeln!(out, "# {line}");
        }
        let _ = writeln!(out, "# Register https://YOUR-HOST/webhooks/{} with the provider.", p.name);
        let _ = writeln!(out, "[[sources]]\nname = \"{}\"\nscheme = \"{}\"", p.name, p.name);
        for key in &p.scheme_keys {
            let _ = writeln!(out, "{key}");
        }
        let _ = writeln!(out, "format = \"{}\"", p.format);
        let _ = writeln!(
            out,
            "# The webhook secret (several, comma-separated, while one is rotated out).\nsecrets_env = \"{}\"",
            p.secrets_env
        );
        for key in &p.source_keys {
            let _ = writeln!(out, "{key}");
        }
        out.push_str(
            "# Orders are registered first (POST /v1/orders, `payhook orders import`) and a payment must match one;\n\
             # or let the first payment create its order:\n# orders = \"implicit\"\n",
        );
    }
    out
}

/// The environment file's text: the token, then a commented line to fill in for each variable the sources read.
fn env_text(providers: &[Provider], token: &str) -> String {
    let mut out = String::from(
        "# payhook's secrets, read from the environment by `payhook serve`. Keep this file readable by payhook only.\n\
         # The API token of /v1 and the dashboard, generated by `payhook init`:\n",
    );
    let _ = writeln!(out, "PAYHOOK_API_TOKEN={token}");
    for p in providers {
        let secret = p.about.get(1).and_then(|s| s.strip_prefix("Secret: ")).unwrap_or("its webhook secret");
        let _ = writeln!(out, "# {}'s webhook secret: {secret}", p.name);
        let _ = writeln!(out, "#{}=", p.secrets_env);
        for (var, what) in &p.more_env {
            let _ = writeln!(out, "# {}: {what}\n#{var}=", p.name);
        }
    }
    out
}

fn toml_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// 24 bytes of the operating system's random generator, as 48 hex digits.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 24];
    getrandom::getrandom(&mut bytes).map_err(|e| anyhow::anyhow!("cannot read random bytes for the API token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The environment file beside `config`: its name with `.env` (`payhook.toml` → `payhook.env`).
fn env_file_beside(config: &Path) -> PathBuf {
    let stem = config.file_stem().map_or_else(|| "payhook".into(), |s| s.to_string_lossy().into_owned());
    config.with_file_name(format!("{stem}.env"))
}

/// Creates `path` with `text`, never over an existing file; `private` files are readable by their owner only.
fn create_new(path: &Path, text: &str, private: bool) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

pub fn run(config: Option<&Path>, args: InitArgs) -> Result<()> {
    let config = args.out.clone().or_else(|| config.map(Path::to_path_buf)).unwrap_or_else(|| "payhook.toml".into());
    let env_file = args.env_file.clone().unwrap_or_else(|| env_file_beside(&config));
    let mut providers: Vec<Provider> = Vec::new();
    for name in &args.providers {
        if providers.iter().any(|p| &p.name == name) {
            return Err(UsageError(format!("{name} is named twice: a provider has one source")).into());
        }
        providers.push(provider(name)?);
    }
    if config == env_file {
        return Err(UsageError(format!("--env-file: {} is the configuration file", env_file.display())).into());
    }
    for path in [&config, &env_file] {
        if path.exists() {
            return Err(UsageError(format!(
                "{} exists; payhook init does not overwrite a file (move it away, or write elsewhere with --out and --env-file)",
                path.display()
            ))
            .into());
        }
    }
    let token = random_token()?;
    create_new(&env_file, &env_text(&providers, &token), true)
        .with_context(|| format!("cannot create {}", env_file.display()))?;
    if let Err(e) = create_new(&config, &config_text(&providers, &args, &env_file), false) {
        // Leave nothing half-done: the token file without its configuration would only confuse the next run.
        let _ = std::fs::remove_file(&env_file);
        return Err(e).with_context(|| format!("cannot create {}", config.display()));
    }
    let vars: Vec<&str> = providers
        .iter()
        .flat_map(|p| std::iter::once(p.secrets_env.as_str()).chain(p.more_env.iter().map(|(v, _)| v.as_str())))
        .collect();
    let (c, e) = (config.display(), env_file.display());
    println!("wrote {c}: {} source(s), no secrets", providers.len());
    println!("wrote {e} (readable by you only): a new API token, and a line to fill in for {}", vars.join(", "));
    println!("next: fill in {e}, then");
    println!("  set -a; . {}; set +a", shell_path(&env_file));
    println!("  payhook --config {c} config check");
    println!("  payhook --config {c} serve");
    Ok(())
}

/// A path as a shell command takes it: `./payhook.env` rather than `payhook.env`, which `.` would look up in PATH.
fn shell_path(path: &Path) -> String {
    if path.is_absolute() || path.starts_with(".") {
        path.display().to_string()
    } else {
        format!("./{}", path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_provider_resolves_and_an_unknown_one_is_a_usage_error() {
        for name in known() {
            let p = provider(name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(p.secrets_env.ends_with("_WEBHOOK_SECRET") && !p.secrets_env.contains('-'), "{p:?}");
        }
        let err = provider("no-such-provider").expect_err("unknown");
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err:#}");
        assert!(err.to_string().contains("paddle") && err.to_string().contains("stripe"), "{err:#}");
    }

    #[test]
    fn a_provider_without_a_format_of_its_own_is_read_in_the_generic_format() {
        assert_eq!(provider("standard-webhooks").map(|p| p.format).ok().as_deref(), Some("generic"));
        assert_eq!(provider("hmac").map(|p| p.format).ok().as_deref(), Some("generic"));
        assert_eq!(provider("stripe").map(|p| p.format).ok().as_deref(), Some("stripe"));
        assert_eq!(provider("github").map(|p| p.format).ok().as_deref(), Some("github"));
        assert_eq!(provider("paddle").map(|p| p.format).ok().as_deref(), Some("paddle"));
    }

    #[test]
    fn the_environment_file_sits_beside_the_configuration_under_its_name() {
        assert_eq!(env_file_beside(Path::new("payhook.toml")), Path::new("payhook.env"));
        assert_eq!(env_file_beside(Path::new("/etc/x/shop.toml")), Path::new("/etc/x/shop.env"));
    }

    #[test]
    fn the_token_is_48_hex_digits_and_never_twice_the_same() {
        let (a, b) = (random_token().expect("token"), random_token().expect("token"));
        assert_eq!(a.len(), 48);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }
}
