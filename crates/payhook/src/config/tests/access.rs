//! `[[server.tokens]]`, `server.identity_header` and `[[server.identities]]`: what resolves, and each refusal
//! with its line.

use super::*;
use payhook_server::Scope;
use payhook_server::settings::IdentityMatch;
use sha2::{Digest, Sha256};

const GRAFANA: &str = "grafana-token-0123456789abcdefgh";

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn refusal(text: &str) -> String {
    format!("{:#}", with_env(text, &[]).unwrap_err())
}

#[test]
fn three_tokens_resolve_with_their_highest_scope_digest_and_expiry() {
    let text = format!(
        "[[server.tokens]]\nname = \"grafana\"\nscopes = [\"read\"]\ntoken_sha256 = \"{}\"\n\
         not_after = \"2027-06-30T00:00:00Z\"\n\
         [[server.tokens]]\nname = \"oncall\"\nscopes = [\"read\", \"operate\"]\ntoken_env = \"ONCALL_TOKEN\"\n\
         [[server.tokens]]\nname = \"platform\"\nscopes = [\"admin\"]\ntoken_sha256 = \"{}\"\n",
        digest(GRAFANA),
        digest(GRAFANA).to_uppercase()
    );
    let c = with_env(&text, &[("ONCALL_TOKEN", "  oncall-token-0123456789abcdef\n")]).unwrap();
    let tokens = &c.settings.access.tokens;
    let summary: Vec<(&str, Scope)> = tokens.iter().map(|t| (t.name.as_str(), t.scope)).collect();
    assert_eq!(summary, [("grafana", Scope::Read), ("oncall", Scope::Operate), ("platform", Scope::Admin)]);
    assert_eq!(tokens[0].sha256, <[u8; 32]>::from(Sha256::digest(GRAFANA.as_bytes())));
    assert_eq!(tokens[0].not_after_ms, Some(1_814_313_600_000));
    assert_eq!(tokens[1].sha256, <[u8; 32]>::from(Sha256::digest(b"oncall-token-0123456789abcdef")), "trimmed");
    assert_eq!(tokens[2].sha256, tokens[0].sha256, "hex digits in either case");
    assert!(!format!("{:?}", c.settings.access).contains(&digest(GRAFANA)[..16]), "no digest in Debug");
}

#[test]
fn an_unknown_scope_a_duplicate_name_or_a_malformed_digest_is_refused_with_its_line() {
    let token = |name: &str, scopes: &str, digest: &str| {
        format!("[[server.tokens]]\nname = \"{name}\"\nscopes = {scopes}\ntoken_sha256 = \"{digest}\"\n")
    };
    let good = digest(GRAFANA);
    let err = refusal(&format!("{}{}", token("a", "[\"read\"]", &good), token("b", "[\"rad\"]", &good)));
    assert!(err.starts_with("f.toml:7: server.tokens[1] (b): scopes: unknown scope \"rad\""), "{err}");
    let err = refusal(&format!("{}{}", token("a", "[\"read\"]", &good), token("a", "[\"read\"]", &good)));
    assert!(err.starts_with("f.toml:6: server.tokens[1] (a): name:") && err.contains("already"), "{err}");
    let err = refusal(&token("api_token", "[\"read\"]", &good));
    assert!(err.contains("name: \"api_token\" is already"), "{err}");
    let err = refusal(&token("a", "[\"read\"]", &good[1..]));
    assert!(err.starts_with("f.toml:4: server.tokens[0] (a): token_sha256: must be 64 hexadecimal digits"), "{err}");
    let err = refusal(&token("a", "[]", &good));
    assert!(err.contains("server.tokens[0] (a): scopes: give at least one"), "{err}");
    let err = refusal(&format!("{}not_after = \"2027-06-30\"\n", token("a", "[\"read\"]", &good)));
    assert!(err.contains("server.tokens[0] (a): not_after:"), "{err}");
    let err = refusal("[[server.tokens]]\nname = \"a\"\nscopes = [\"read\"]\n");
    assert!(err.contains("give exactly one of token_sha256 and token_env"), "{err}");
    let err = refusal("[[server.tokens]]\nname = \"a\"\nscopes = [\"read\"]\ntoken_env = \"UNSET_TOKEN_VAR\"\n");
    assert!(err.contains("token_env: the environment variable UNSET_TOKEN_VAR is not set"), "{err}");
    let short = "[[server.tokens]]\nname = \"a\"\nscopes = [\"read\"]\ntoken_env = \"SHORT\"\n";
    let err = format!("{:#}", with_env(short, &[("SHORT", "too-short")]).unwrap_err());
    assert!(err.contains("at least 24 characters"), "{err}");
    let err = refusal("[[server.tokens]]\nname = \"a\"\nscopes = [\"read\"]\ntoken = \"x\"\n");
    assert!(err.contains("unknown field `token`"), "{err}");
}

#[test]
fn identities_resolve_by_name_or_domain_and_need_a_header_and_trusted_proxies() {
    let base = "[server]\nidentity_header = \"X-Forwarded-Email\"\ntrusted_proxies = [\"10.0.0.1\"]\n";
    let text = format!(
        "{base}[[server.identities]]\ndomain = \"example.com\"\nscopes = [\"read\"]\n\
         [[server.identities]]\nname = \"oncall@example.com\"\nscopes = [\"operate\"]\n"
    );
    let c = with_env(&text, &[]).unwrap();
    assert_eq!(c.settings.access.identity_header.as_deref(), Some("x-forwarded-email"));
    let rules: Vec<(&IdentityMatch, Scope)> =
        c.settings.access.identities.iter().map(|r| (&r.matches, r.scope)).collect();
    assert_eq!(rules[0], (&IdentityMatch::Domain("example.com".into()), Scope::Read));
    assert_eq!(rules[1], (&IdentityMatch::Exact("oncall@example.com".into()), Scope::Operate));

    let err = refusal(&format!("{base}[[server.identities]]\nname = \"a\"\ndomain = \"b\"\nscopes = [\"read\"]\n"));
    assert!(err.starts_with("f.toml:4: server.identities[0]: give exactly one of name"), "{err}");
    let err = refusal(&format!("{base}[[server.identities]]\ndomain = \"@example.com\"\nscopes = [\"read\"]\n"));
    assert!(err.contains("without `@`"), "{err}");
    let err = refusal("[[server.identities]]\ndomain = \"example.com\"\nscopes = [\"read\"]\n");
    assert!(err.contains("set server.identity_header too"), "{err}");
    let err = refusal("[server]\nidentity_header = \"X-Email\"\n");
    assert!(err.contains("set server.trusted_proxies too"), "{err}");
    let err = refusal("[server]\nidentity_header = \"X Email\"\ntrusted_proxies = [\"10.0.0.1\"]\n");
    assert!(err.contains("is not a header name"), "{err}");
}
