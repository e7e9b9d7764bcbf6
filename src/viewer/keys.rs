//! What a key press does to the screen: a pure state machine (the state and a key in, the new
//! state and what the terminal loop has to do out). The loop in `live` reads keys and acts on the
//! `Effect`; nothing here touches the terminal.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::Sort;

/// Rows a page key moves.
pub const PAGE: u16 = 10;

/// The keys the viewer knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    /// Ctrl-C.
    Interrupt,
    Char(char),
    Other,
}

impl From<KeyEvent> for Key {
    fn from(key: KeyEvent) -> Self {
        match key.code {
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
            KeyCode::Up => Key::Up,
            KeyCode::Down => Key::Down,
            KeyCode::PageUp => Key::PageUp,
            KeyCode::PageDown => Key::PageDown,
            KeyCode::Home => Key::Home,
            KeyCode::End => Key::End,
            KeyCode::Enter => Key::Enter,
            KeyCode::Esc => Key::Esc,
            KeyCode::Char(c) => Key::Char(c),
            _ => Key::Other,
        }
    }
}

/// What is on the screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Screen {
    /// The table of nodes.
    Table,
    /// A node's full explanation over the table, scrolled down `scroll` lines.
    Explanation { node: String, scroll: u16 },
}

/// The viewer's state besides the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Ui {
    /// The order of the rows.
    pub sort: Sort,
    /// The selected node, by name so that it stays selected when the rows move; none: the first.
    pub selected: Option<String>,
    pub screen: Screen,
}

/// What the terminal loop does after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing but drawing the new state.
    Redraw,
    /// Ask for this node's explanation now (fresh, for the pane just opened).
    Explain(String),
    /// End the viewer.
    Quit,
}

impl Ui {
    /// The table, ordered by `sort`, nothing selected yet.
    pub fn new(sort: Sort) -> Self {
        Self {
            sort,
            selected: None,
            screen: Screen::Table,
        }
    }

    /// The selected row of `rows` (the node names in the order shown): the selected node's, or
    /// the first when none is selected or it is gone.
    pub fn selected_index(&self, rows: &[String]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        Some(self.selected.as_ref().and_then(|s| rows.iter().position(|r| r == s)).unwrap_or(0))
    }

    /// The state after `key`, with `rows` the node names in the order shown and `max_scroll` the
    /// last line an open explanation can be scrolled to.
    pub fn on_key(&mut self, key: Key, rows: &[String], max_scroll: u16) -> Effect {
        if key == Key::Interrupt {
            return Effect::Quit;
        }
        match &mut self.screen {
            Screen::Explanation { scroll, .. } => {
                match key {
                    Key::Esc | Key::Enter | Key::Char('q') => self.screen = Screen::Table,
                    Key::Up | Key::Char('k') => *scroll = scroll.saturating_sub(1),
                    Key::Down | Key::Char('j') => *scroll = (*scroll + 1).min(max_scroll),
                    Key::PageUp => *scroll = scroll.saturating_sub(PAGE),
                    Key::PageDown | Key::Char(' ') => *scroll = scroll.saturating_add(PAGE).min(max_scroll),
                    Key::Home | Key::Char('g') => *scroll = 0,
                    Key::End | Key::Char('G') => *scroll = max_scroll,
                    _ => {}
                }
                Effect::Redraw
            }
            Screen::Table => match key {
                Key::Esc | Key::Char('q') => Effect::Quit,
                Key::Char('s') => {
                    self.sort = self.sort.next();
                    Effect::Redraw
                }
                Key::Enter => match self.selected_index(rows) {
                    Some(i) => {
                        let node = rows[i].clone();
                        self.selected = Some(node.clone());
                        self.screen = Screen::Explanation {
                            node: node.clone(),
                            scroll: 0,
                        };
                        Effect::Explain(node)
                    }
                    None => Effect::Redraw,
                },
                Key::Up | Key::Char('k') => self.select(rows, -1),
                Key::Down | Key::Char('j') => self.select(rows, 1),
                Key::PageUp => self.select(rows, -i64::from(PAGE)),
                Key::PageDown => self.select(rows, i64::from(PAGE)),
                Key::Home | Key::Char('g') => self.select(rows, i64::MIN / 2),
                Key::End | Key::Char('G') => self.select(rows, i64::MAX / 2),
                _ => Effect::Redraw,
            },
        }
    }

    /// Moves the selection `by` rows, stopping at the first and the last.
    fn select(&mut self, rows: &[String], by: i64) -> Effect {
        if let Some(i) = self.selected_index(rows) {
            let last = rows.len() as i64 - 1;
            let to = (i as i64).saturating_add(by).clamp(0, last) as usize;
            self.selected = Some(rows[to].clone());
        }
        Effect::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::viewer::SortBy;

    #[test]
    fn keys_move_the_selection_open_scroll_and_close_the_explanation_and_quit() {
        let rows: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut ui = Ui::new(Sort::by(SortBy::Creation));
        assert_eq!(ui.selected_index(&rows), Some(0));
        assert_eq!(ui.selected_index(&[]), None);
        // Down, j and End move down and stop at the last row; Up, k and Home back.
        assert_eq!(ui.on_key(Key::Down, &rows, 0), Effect::Redraw);
        assert_eq!(ui.selected.as_deref(), Some("b"));
        ui.on_key(Key::Char('j'), &rows, 0);
        ui.on_key(Key::Char('j'), &rows, 0);
        assert_eq!(ui.selected.as_deref(), Some("c"));
        ui.on_key(Key::Up, &rows, 0);
        ui.on_key(Key::Char('k'), &rows, 0);
        ui.on_key(Key::Char('k'), &rows, 0);
        assert_eq!(ui.selected.as_deref(), Some("a"));
        ui.on_key(Key::End, &rows, 0);
        assert_eq!(ui.selected.as_deref(), Some("c"));
        ui.on_key(Key::PageUp, &rows, 0);
        assert_eq!(ui.selected.as_deref(), Some("a"));
        // The selection follows its node when the rows move.
        ui.on_key(Key::Down, &rows, 0);
        let resorted: Vec<String> = ["c", "b", "a"].map(String::from).to_vec();
        assert_eq!(ui.selected_index(&resorted), Some(1));
        // s still cycles the order.
        ui.on_key(Key::Char('s'), &rows, 0);
        assert_eq!(ui.sort, Sort::by(SortBy::Creation).next());

        // Enter opens the selected node's explanation and asks for it.
        assert_eq!(ui.on_key(Key::Enter, &rows, 0), Effect::Explain("b".to_string()));
        let open = |scroll| Screen::Explanation {
            node: "b".to_string(),
            scroll,
        };
        assert_eq!(ui.screen, open(0));
        // Scrolling stays within the text; s and the row keys do nothing else here.
        ui.on_key(Key::Down, &rows, 12);
        ui.on_key(Key::Char('j'), &rows, 12);
        assert_eq!(ui.screen, open(2));
        ui.on_key(Key::PageDown, &rows, 12);
        assert_eq!(ui.screen, open(12));
        ui.on_key(Key::Char('k'), &rows, 12);
        ui.on_key(Key::Char('s'), &rows, 12);
        assert_eq!((ui.screen.clone(), ui.selected.as_deref()), (open(11), Some("b")));
        ui.on_key(Key::Home, &rows, 12);
        assert_eq!(ui.screen, open(0));
        // Esc, Enter and q close it (q does not quit there).
        for close in [Key::Esc, Key::Enter, Key::Char('q')] {
            ui.screen = open(3);
            assert_eq!(ui.on_key(close, &rows, 12), Effect::Redraw);
            assert_eq!(ui.screen, Screen::Table, "{close:?}");
        }
        // Enter with no rows opens nothing; q, Esc and Ctrl-C quit the table; Ctrl-C the pane too.
        assert_eq!(ui.on_key(Key::Enter, &[], 0), Effect::Redraw);
        assert_eq!(ui.screen, Screen::Table);
        for quit in [Key::Char('q'), Key::Esc, Key::Interrupt] {
            assert_eq!(ui.clone().on_key(quit, &rows, 0), Effect::Quit, "{quit:?}");
        }
        ui.screen = open(0);
        assert_eq!(ui.on_key(Key::Interrupt, &rows, 0), Effect::Quit);
    }

    #[test]
    fn terminal_keys_map_to_the_viewers_keys() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let key = |code, modifiers| Key::from(KeyEvent::new(code, modifiers));
        assert_eq!(key(KeyCode::Char('c'), KeyModifiers::CONTROL), Key::Interrupt);
        assert_eq!(key(KeyCode::Char('c'), KeyModifiers::NONE), Key::Char('c'));
        assert_eq!(key(KeyCode::Enter, KeyModifiers::NONE), Key::Enter);
        assert_eq!(key(KeyCode::Down, KeyModifiers::NONE), Key::Down);
        assert_eq!(key(KeyCode::F(1), KeyModifiers::NONE), Key::Other);
    }
}
