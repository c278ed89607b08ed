//! Aligned text tables and timestamps for people reading a terminal.

use std::fmt::Write as _;

/// Rows under a header, each column as wide as its widest cell, columns two spaces apart.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// A table with these column titles, every column aligned left.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            right: vec![false; header.len()],
        }
    }

    /// Aligns the named columns to the right (counts, ids).
    pub fn right(mut self, columns: &[&str]) -> Self {
        for (i, h) in self.header.iter().enumerate() {
            if columns.contains(&h.as_str()) {
                self.right[i] = true;
            }
        }
        self
    }

    /// Adds a row; control characters in cells are shown as spaces so that one cell stays on one line.
    pub fn row(&mut self, cells: Vec<String>) {
        let cells = cells.into_iter().map(|c| c.chars().map(|ch| if ch.is_control() { ' ' } else { ch }).collect());
        self.rows.push(cells.collect());
    }

    /// The table as lines of text, each ending with a newline, without trailing spaces.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = width - cell.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right[i] {
                    let _ = write!(line, "{}{cell}", " ".repeat(pad));
                } else {
                    let _ = write!(line, "{cell}{}", " ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `text` cut to at most `max` characters, marking the cut with `…`.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An optional value for a table cell: `-` when absent.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A unix-milliseconds timestamp as `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn utc(ms: i64) -> String {
    payhook_core::time::display_ms(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_lines_have_no_trailing_spaces() {
        let mut t = Table::new(&["ID", "NAME", "NOTE"]).right(&["ID"]);
        t.row(vec!["7".into(), "évènement".into(), String::new()]);
        t.row(vec!["1234".into(), "x".into(), "line\nbreak".into()]);
        assert_eq!(t.render(), "  ID  NAME       NOTE\n   7  évènement\n1234  x          line break\n");
    }

    #[test]
    fn timestamps_are_shown_in_utc_including_leap_days_and_times_before_1970() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03");
        assert_eq!(utc(1_709_210_096_789), "2024-02-29 12:34:56");
        assert_eq!(utc(-1000), "1969-12-31 23:59:59");
    }

    #[test]
    fn long_text_is_clipped_with_a_mark() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abcd", 4), "abcd");
    }
}
