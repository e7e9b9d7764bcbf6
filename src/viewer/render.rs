//! Drawing a `View`: the header (totals, request bars, where prices come from) and the table of
//! nodes into a ratatui frame, or as plain text for `--once` and the tests.

use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, TableState};
use ratatui::{Frame, Terminal};

use crate::scheduling::resources::{format_amount, CPU};

use super::{NodeRow, NodeStatus, Pane, Price, Usage, View, HOURS_PER_MONTH};

/// `kubectl`'s age: `42s`, `17m`, `5h`, `3d`.
pub fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `text` in at most `width` characters, its end replaced by `…` when cut.
pub fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// A bar of `width` cells for `fraction` (clamped to 0..=1), `█` filled and `░` empty.
pub fn bar(fraction: f64, width: usize) -> String {
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

/// `$0.1664`: four decimals (t3.nano's $0.0052 stays readable), `~` before an estimate.
fn price_text(price: Option<Price>) -> String {
    match price {
        Some(Price {
            usd_per_hour,
            estimated: false,
        }) => format!("${usd_per_hour:.4}"),
        Some(Price {
            usd_per_hour,
            estimated: true,
        }) => format!("~${usd_per_hour:.4}"),
        None => "-".to_string(),
    }
}

/// `1.9/3.9` cores, `4.6Gi/15.2Gi` bytes, plain numbers otherwise.
fn amounts_text(u: &Usage) -> String {
    let one = |units: i64| -> String {
        if u.resource == CPU {
            format!("{:.1}", units as f64 / 1000.0)
        } else if u.resource == "memory" || u.resource == "ephemeral-storage" {
            format!("{:.1}Gi", units as f64 / (1u64 << 30) as f64)
        } else {
            format_amount(&u.resource, units)
        }
    };
    format!("{}/{}", one(u.requested), one(u.allocatable))
}

const ROW_BAR: usize = 10;
/// Widest an extra label column gets (label keys with a prefix are long).
const EXTRA_WIDTH: usize = 40;

/// The value of the `i`th extra label, `-` when the node has none.
fn extra_text(row: &NodeRow, i: usize) -> &str {
    row.extra.get(i).and_then(Option::as_deref).unwrap_or("-")
}
const TOTAL_BAR: usize = 20;

fn usage_style(fraction: f64) -> Style {
    match fraction {
        f if f >= 0.9 => Style::new().fg(Color::Red),
        f if f >= 0.6 => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::Green),
    }
}

fn status_style(status: &NodeStatus) -> Style {
    if status.deleting || status.cordoned {
        Style::new().fg(Color::Yellow)
    } else if status.ready == Some(true) {
        Style::new().fg(Color::Green)
    } else {
        Style::new().fg(Color::Red)
    }
}

/// The lines above the table.
fn header(view: &View) -> Vec<Line<'static>> {
    let t = &view.totals;
    let mut price = format!("${:.4}/hour · ${:.2}/month", t.usd_per_hour, t.usd_per_hour * HOURS_PER_MONTH);
    if t.estimated > 0 {
        price.push_str(&format!(" ({} estimated)", t.estimated));
    }
    if t.unpriced > 0 {
        price.push_str(&format!(" ({} without a price)", t.unpriced));
    }
    let selector = if view.selector.is_empty() {
        "every node".to_string()
    } else {
        format!("-l {}", view.selector)
    };
    let mut lines = vec![Line::from(vec![
        Span::styled("karpenter-rs nodes", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {} node{} ({selector})  {price}",
            t.nodes,
            if t.nodes == 1 { "" } else { "s" }
        )),
    ])];
    let label_width = t.usage.iter().map(|u| u.resource.len() + 1).max().unwrap_or(0).max(8);
    for u in &t.usage {
        lines.push(Line::from(vec![
            Span::raw(format!("{:<label_width$}", u.resource)),
            Span::styled(bar(u.fraction(), TOTAL_BAR), usage_style(u.fraction())),
            Span::raw(format!(" {:>3.0}%  {} requested", u.fraction() * 100.0, amounts_text(u))),
        ]));
    }
    lines.push(Line::raw(format!(
        "{:<label_width$}{} running, {} bound to these nodes, {} pending    sort: {} (s)  select: ↑↓  explain: Enter  quit: q",
        "pods",
        t.pods_running,
        t.pods_bound,
        t.pods_pending,
        view.sort.text()
    )));
    lines.push(Line::raw(format!(
        "{:<label_width$}the nodes' price annotations, else {}",
        "prices", view.prices
    )));
    if let Some(note) = &view.reasons {
        lines.push(Line::raw(format!("{:<label_width$}{note}", "why")));
    }
    if let Some(error) = &view.error {
        lines.push(Line::styled(format!("watch: {error}"), Style::new().fg(Color::Red)));
    }
    lines
}

/// Draws `view` into `frame`: the header, then one row per node.
pub fn render(frame: &mut Frame, view: &View) {
    let header = header(view);
    let [top, table] = Layout::vertical([Constraint::Length(header.len() as u16 + 1), Constraint::Min(0)]).areas(frame.area());
    frame.render_widget(Paragraph::new(header), top);
    render_table(frame, table, view);
    if let Some(pane) = &view.explanation {
        render_pane(frame, table, pane);
    }
}

/// The last line a pane's text can be scrolled to.
pub fn explanation_scroll_limit(pane: &Pane) -> u16 {
    let lines = pane.text.as_deref().map_or(1, |t| t.lines().count());
    u16::try_from(lines.saturating_sub(1)).unwrap_or(u16::MAX)
}

/// A node's full explanation over the table.
fn render_pane(frame: &mut Frame, area: Rect, pane: &Pane) {
    let title = format!(" explain node {} · ↑↓ PgUp PgDn scroll · Esc, Enter or q: back ", pane.node);
    let text = match &pane.text {
        Some(text) => text.clone(),
        None => format!("explaining node {}…", pane.node),
    };
    frame.render_widget(Clear, area);
    let paragraph = Paragraph::new(text)
        .block(Block::bordered().title(title))
        .scroll((pane.scroll.min(explanation_scroll_limit(pane)), 0));
    frame.render_widget(paragraph, area);
}

fn render_table(frame: &mut Frame, area: Rect, view: &View) {
    let mut titles = vec!["NAME", "TYPE", "CAPACITY", "ZONE", "$/HOUR", "PODS"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    titles.extend(view.totals.usage.iter().map(|u| u.resource.to_uppercase()));
    titles.extend(view.extra_labels.iter().cloned());
    titles.extend(["AGE".to_string(), "STATUS".to_string()]);
    let name_width = view.rows.iter().map(|r| r.name.len()).max().unwrap_or(4).clamp(4, 48) as u16;
    let text_width = |f: fn(&NodeRow) -> &str, min: usize| view.rows.iter().map(|r| f(r).len()).max().unwrap_or(0).max(min) as u16;
    let mut widths = vec![
        name_width,
        text_width(|r| &r.instance_type, 4),
        text_width(|r| &r.capacity_type, 8),
        text_width(|r| &r.zone, 4),
        9,
        7,
    ];
    widths.extend(view.totals.usage.iter().map(|_| ROW_BAR as u16 + 5));
    widths.extend(view.extra_labels.iter().enumerate().map(|(i, key)| {
        let values = view.rows.iter().map(|r| extra_text(r, i).chars().count());
        values.max().unwrap_or(0).max(key.chars().count()).min(EXTRA_WIDTH) as u16
    }));
    widths.push(4);
    let mut constraints: Vec<Constraint> = widths.iter().map(|w| Constraint::Length(*w)).collect();
    // The reasons take what the other columns leave, each cut to fit.
    let why_width = if view.reasons.is_some() {
        let status = view.rows.iter().map(|r| r.status.text().len()).max().unwrap_or(0).max(6) as u16;
        widths.push(status);
        constraints.push(Constraint::Length(status));
        titles.push("WHY".to_string());
        constraints.push(Constraint::Fill(1));
        let used: u16 = widths.iter().map(|w| w + 1).sum();
        area.width.saturating_sub(used) as usize
    } else {
        constraints.push(Constraint::Min(8));
        0
    };

    let rows = view.rows.iter().map(|r| {
        let mut cells = vec![
            Cell::from(r.name.clone()),
            Cell::from(r.instance_type.clone()),
            Cell::from(r.capacity_type.clone()),
            Cell::from(r.zone.clone()),
            Cell::from(price_text(r.price)),
            Cell::from(format!("{}/{}", r.pods, r.max_pods)),
        ];
        cells.extend(r.usage.iter().map(|u| {
            Cell::from(Line::from(vec![
                Span::styled(bar(u.fraction(), ROW_BAR), usage_style(u.fraction())),
                Span::raw(format!(" {:>3.0}%", u.fraction() * 100.0)),
            ]))
        }));
        cells.extend((0..view.extra_labels.len()).map(|i| Cell::from(extra_text(r, i).to_string())));
        cells.push(Cell::from(age(r.age_seconds)));
        cells.push(Cell::from(Span::styled(r.status.text(), status_style(&r.status))));
        if view.reasons.is_some() {
            cells.push(Cell::from(truncate(&r.why, why_width)));
        }
        Row::new(cells)
    });
    let table = Table::new(rows, constraints)
        .header(Row::new(titles).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .column_spacing(1);
    let mut state = TableState::default().with_selected(view.selected);
    frame.render_stateful_widget(table, area, &mut state);
}

/// `view` drawn `width` columns wide, as plain lines without trailing spaces (`--once`, tests).
pub fn render_text(view: &View, width: u16) -> String {
    let height = header(view).len() as u16 + 2 + view.rows.len() as u16;
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("the test backend cannot fail");
    terminal.draw(|frame| render(frame, view)).expect("the test backend cannot fail");
    let buffer = terminal.backend().buffer();
    let mut lines: Vec<String> = (0..buffer.area.height)
        .map(|y| {
            let line: String = (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect();
            line.trim_end().to_string()
        })
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n") + "\n"
}
