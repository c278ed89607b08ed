//! The dashboard's markup: the page layout with its inline stylesheet, status badges, times, and the
//! throughput chart as inline SVG. Everything is rendered on the server; the pages carry no JavaScript.

use crate::base::metrics::Minute;
use crate::base::scope::Scope;
use crate::runtime::session::Session;
use maud::{DOCTYPE, Markup, PreEscaped, html};

/// The stylesheet, inline: one request per page, and a Content-Security-Policy without any other source.
const CSS: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:.5rem 1rem;display:flex;flex-wrap:wrap;gap:.25rem 1rem;align-items:center}
header .brand{font-weight:700;margin-right:.5rem}
header a{color:#cfd6e4;text-decoration:none;padding:.25rem 0}
header a.on,header a:hover{color:#fff;border-bottom:2px solid #7aa2f7}
header form{margin-left:auto}
main{max-width:1240px;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:.25rem 0 1rem}
h2{font-size:1.1rem;margin:1.5rem 0 .5rem}
a{color:#2458c6}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(9.5rem,1fr));gap:.75rem}
.card{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.6rem .8rem}
.card .n{font-size:1.6rem;font-weight:650}
.card .l{color:#5b6474;font-size:.85rem}
.scroll{overflow-x:auto;background:#fff;border:1px solid #dde1e8;border-radius:6px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.4rem .6rem;border-bottom:1px solid #eceef2;vertical-align:top}
th{font-size:.8rem;color:#5b6474;font-weight:600;white-space:nowrap}
td.wrap{word-break:break-word;min-width:12rem}
.mono,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85rem}
pre{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.75rem;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
pre .byte{background:#fde0e0;color:#a01b1b;border-radius:3px}
.tabs{display:flex;gap:1rem;align-items:baseline;flex-wrap:wrap}
.badge{display:inline-block;padding:.05rem .45rem;border-radius:999px;font-size:.78rem;font-weight:600;white-space:nowrap;background:#e6e8ec;color:#39414f}
.s-processed,.s-delivered,.s-paid{background:#dcf5e3;color:#17692f}
.s-deferred,.s-pending{background:#fff1cc;color:#7a5300}
.s-dead_lettered,.s-dead,.s-failed,.s-disputed{background:#fde0e0;color:#a01b1b}
.s-duplicate,.s-ignored,.s-unrouted{background:#e6e8ec;color:#4a5261}
.s-refunded{background:#e3e9fd;color:#2a46a0}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:flex-end;margin-bottom:.75rem}
label{display:flex;flex-direction:column;font-size:.8rem;color:#5b6474;gap:.15rem}
input,select,button{font:inherit;padding:.35rem .5rem;border:1px solid #c4cad5;border-radius:4px;background:#fff;min-height:2.2rem}
button{background:#2458c6;color:#fff;border-color:#2458c6;cursor:pointer}
button.quiet{background:#fff;color:#2458c6}
button.danger{background:#b42323;border-color:#b42323}
header button{background:transparent;border-color:#5b6474;color:#cfd6e4;min-height:auto;padding:.15rem .6rem}
form.inline{display:inline}
.flash{background:#e3f0ff;border:1px solid #b6d2fb;border-radius:6px;padding:.5rem .75rem;margin-bottom:1rem}
.error{background:#fde0e0;border:1px solid #f3b4b4;border-radius:6px;padding:.5rem .75rem;margin-bottom:1rem}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.75rem;margin:0}
dl.kv dt{color:#5b6474}
dl.kv dd{margin:0;word-break:break-word}
.chart{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.5rem}
.chart svg{width:100%;height:auto;display:block}
.muted{color:#5b6474}
.login{max-width:22rem;margin:12vh auto;background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:1.25rem}
.login form{display:flex;flex-direction:column;gap:.75rem}
@media (max-width:640px){
 main{padding:.6rem}
 header{padding:.5rem .6rem}
 header form{margin-left:0}
 th,td{padding:.35rem .4rem}
 .hide-narrow{display:none}
 dl.kv{grid-template-columns:1fr}
 dl.kv dt{margin-top:.3rem}
}
"#;

/// The sections of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Events,
    DeadLetters,
    Outbox,
    Orders,
    Billing,
    Audit,
}

const SECTIONS: [(Section, &str, &str, Scope); 7] = [
    (Section::Overview, "/ui", "Overview", Scope::Read),
    (Section::Events, "/ui/events", "Events", Scope::Read),
    (Section::DeadLetters, "/ui/dead-letters", "Dead letters", Scope::Read),
    (Section::Outbox, "/ui/outbox", "Outbox", Scope::Read),
    (Section::Orders, "/ui/orders", "Orders", Scope::Read),
    (Section::Billing, "/ui/billing", "Billing", Scope::Read),
    (Section::Audit, "/ui/audit", "Audit", Scope::Admin),
];

/// What a page needs besides its content.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    pub(crate) section: Section,
    /// The session, with its caller as the configuration in force sees it.
    pub(crate) session: &'a Session,
    pub(crate) flash: Option<String>,
    /// Reload the page every this many seconds (the overview's live counters).
    pub(crate) refresh_secs: Option<u32>,
}

fn head(title: &str, refresh_secs: Option<u32>) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            @if let Some(secs) = refresh_secs {
                meta http-equiv="refresh" content=(secs);
            }
            title { (title) " · payhook" }
            style { (PreEscaped(CSS)) }
        }
    }
}

/// A page of the logged-in dashboard.
pub(crate) fn page(frame: Frame<'_>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(frame.title, frame.refresh_secs))
            body {
                header {
                    span.brand { "payhook" }
                    nav style="display:flex;flex-wrap:wrap;gap:.25rem 1rem" {
                        @for (section, href, label, needed) in SECTIONS {
                            @if frame.session.may(needed) {
                                a href=(href) class=[(section == frame.section).then_some("on")] { (label) }
                            }
                        }
                    }
                    span.muted id="who" title="What this login may do: read, operate (replay, retry) or admin" {
                        (frame.session.principal.actor) " · " (frame.session.principal.scope.as_str())
                    }
                    form.inline method="post" action="/ui/logout" {
                        (csrf_field(&frame.session.csrf))
                        button type="submit" id="logout" { "Log out" }
                    }
                }
                main {
                    @if let Some(flash) = &frame.flash {
                        div.flash role="status" id="flash" { (flash) }
                    }
                    (content)
                }
            }
        }
    }
}

/// A page outside the session: the login form and errors.
pub(crate) fn bare(title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, None))
            body { (content) }
        }
    }
}

/// The hidden field every state-changing form carries.
pub(crate) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// A status as a coloured badge.
pub(crate) fn badge(status: &str) -> Markup {
    html! { span class={ "badge s-" (status) } { (status.replace('_', " ")) } }
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub(crate) fn time(ms: i64) -> String {
    payhook_core::time::display_ms(ms)
}

/// Deliveries per minute as bars and their mean latency as a line, over the minutes given (oldest first).
pub(crate) fn throughput_chart(minutes: &[Minute]) -> Markup {
    const W: f64 = 900.0;
    const H: f64 = 160.0;
    const TOP: f64 = 14.0;
    let n = minutes.len().max(1) as f64;
    let max_count = minutes.iter().map(|m| m.count).max().unwrap_or(0).max(1);
    let latency_ms = |m: &Minute| if m.count == 0 { 0.0 } else { m.latency_us as f64 / m.count as f64 / 1000.0 };
    let max_latency = minutes.iter().map(latency_ms).fold(0.0_f64, f64::max).max(1.0);
    let slot = W / n;
    let plot = H - TOP;
    let line: Vec<String> = minutes
        .iter()
        .enumerate()
        .filter(|(_, m)| m.count > 0)
        .map(|(i, m)| format!("{:.1},{:.1}", (i as f64 + 0.5) * slot, H - latency_ms(m) / max_latency * plot))
        .collect();
    let total: u64 = minutes.iter().map(|m| m.count).sum();
    html! {
        svg viewBox={ "0 0 " (W) " " (H + 18.0) } role="img" aria-label={ (total) " deliveries in the last hour" } {
            line x1="0" y1=(H) x2=(W) y2=(H) stroke="#c4cad5" {}
            @for (i, m) in minutes.iter().enumerate() {
                @if m.count > 0 {
                    @let h = m.count as f64 / max_count as f64 * plot;
                    rect x=(format!("{:.1}", i as f64 * slot + 1.0)) y=(format!("{:.1}", H - h))
                        width=(format!("{:.1}", (slot - 2.0).max(1.0))) height=(format!("{:.1}", h)) fill="#7aa2f7" {
                        title { (time(m.minute * 60_000)) ": " (m.count) " deliveries, mean " (format!("{:.1}", latency_ms(m))) " ms" }
                    }
                }
            }
            @if !line.is_empty() {
                polyline points=(line.join(" ")) fill="none" stroke="#d9822b" stroke-width="2" {}
            }
            text x="2" y="11" font-size="11" fill="#2458c6" { (max_count) " / min" }
            text x=(W - 2.0) y="11" font-size="11" fill="#d9822b" text-anchor="end" { (format!("{max_latency:.1}")) " ms" }
            text x="2" y=(H + 14.0) font-size="11" fill="#5b6474" { "−60 min" }
            text x=(W - 2.0) y=(H + 14.0) font-size="11" fill="#5b6474" text-anchor="end" { "now" }
        }
    }
}

/// Bytes as received, for a `<pre>`: UTF-8 text as it is (maud escapes `<`, `>`, `&` and quotes), and each byte
/// that is not part of valid UTF-8, or is a control character other than tab and newline (a carriage return
/// included, which HTML would otherwise fold into a newline), as a highlighted `\xNN`.
pub(crate) fn raw_bytes(bytes: &[u8]) -> Markup {
    html! {
        @for chunk in bytes.utf8_chunks() {
            @for piece in visible_pieces(chunk.valid()) {
                @match piece {
                    Piece::Text(text) => { (text) }
                    Piece::Byte(b) => { span.byte title="a control character" { "\\x" (format!("{b:02x}")) } }
                }
            }
            @for b in chunk.invalid() {
                span.byte title="not UTF-8" { "\\x" (format!("{b:02x}")) }
            }
        }
    }
}

/// A run of text shown as it is, or one byte shown as `\xNN`.
enum Piece<'a> {
    Text(&'a str),
    Byte(u8),
}

/// Splits valid UTF-8 around the control characters that would not show in a `<pre>`.
fn visible_pieces(text: &str) -> Vec<Piece<'_>> {
    let hidden = |b: u8| (b < 0x20 && b != b'\t' && b != b'\n') || b == 0x7f;
    let mut pieces = Vec::new();
    let mut start = 0;
    // Control characters are single bytes in UTF-8 and never inside a longer sequence, so these are char
    // boundaries.
    for (i, b) in text.bytes().enumerate() {
        if hidden(b) {
            if start < i {
                pieces.push(Piece::Text(&text[start..i]));
            }
            pieces.push(Piece::Byte(b));
            start = i + 1;
        }
    }
    if start < text.len() {
        pieces.push(Piece::Text(&text[start..]));
    }
    pieces
}

/// A JSON document re-indented (two spaces a level) without being parsed into values: only whitespace between
/// tokens changes, so keys keep their order, duplicate keys all stay, and numbers and strings are the bytes that
/// were sent. `None` when `text` is not JSON.
pub(crate) fn pretty_json(text: &str) -> Option<String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    let mut out = String::with_capacity(text.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.next_if(|c| is_space(*c)).is_some() {}
                // An empty object or array stays on its line.
                if let Some(close) = chars.next_if(|n| matches!(n, '}' | ']')) {
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if is_space(c) => {}
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(time(1_700_000_000_123), "2023-11-14 22:13:20");
    }

    #[test]
    fn the_chart_draws_a_bar_per_busy_minute() {
        let minutes: Vec<Minute> =
            (0..60).map(|i| Minute { minute: i, count: if i % 2 == 0 { 3 } else { 0 }, latency_us: 3_000 }).collect();
        let svg = throughput_chart(&minutes).into_string();
        assert_eq!(svg.matches("<rect").count(), 30, "{svg}");
        assert!(svg.contains("<polyline"), "{svg}");
        assert!(svg.contains("90 deliveries in the last hour"), "{svg}");
    }

    #[test]
    fn raw_bytes_escape_markup_and_show_invalid_bytes_and_control_characters_as_hex() {
        let html = raw_bytes(b"{\"a\" :\t\"<script>&\"}\r\n\xff\x00\xc3\xa9").into_string();
        assert_eq!(
            html,
            "{&quot;a&quot; :\t&quot;&lt;script&gt;&amp;&quot;}<span class=\"byte\" title=\"a control character\">\\x0d</span>\n\
             <span class=\"byte\" title=\"not UTF-8\">\\xff</span>\
             <span class=\"byte\" title=\"a control character\">\\x00</span>é"
        );
    }

    #[test]
    fn pretty_json_changes_only_whitespace_between_tokens() {
        let sent = "{ \"b\":1,\"a\" : [ ],\"a\":{\"s\":\"x, {y}: \\\" z\"},\"n\":1.50e+2,\"e\":{}}";
        let pretty = pretty_json(sent).unwrap();
        assert_eq!(
            pretty,
            "{\n  \"b\": 1,\n  \"a\": [],\n  \"a\": {\n    \"s\": \"x, {y}: \\\" z\"\n  },\n  \"n\": 1.50e+2,\n  \"e\": {}\n}"
        );
        let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        assert_eq!(squeeze(&pretty), squeeze(sent));
        assert_eq!(pretty_json("not json"), None);
        assert_eq!(pretty_json("{\"a\":1"), None);
    }
}
