//! numastat's table printer (its `vtab`), ported line for line so that the layout,
//! the column widths, the line folding at the screen width and the rules for hiding
//! empty rows and columns are numastat's own, quirks included:
//!
//! - a row or column is "seen" once any cell holds a value and "non-zero" once any
//!   value is not `+0.0`; these marks are never cleared, so a table printed twice (one
//!   per process with `-v`) keeps rows shown by the earlier print;
//! - a column is folded to the next section when the line so far plus the *next*
//!   column's width would pass the screen width, even if that column is then hidden;
//! - cells are cut to their column's width; repeated-character cells (the dashes) are
//!   one shorter than the column, which leaves the gutter.

use std::fmt::Write as _;

/// One cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) enum Cell {
    /// Nothing assigned.
    #[default]
    Empty,
    /// A number, printed with the column's decimal places.
    Number(f64),
    /// A label.
    Text(String),
    /// A character repeated to the column's width less the gutter (a rule).
    Rule(char),
}

impl Cell {
    /// The value a sort compares (numastat reads the number's bits of any cell; only
    /// numbers are ever sorted).
    fn value(&self) -> f64 {
        match self {
            Cell::Number(v) => *v,
            _ => 0.0,
        }
    }

    /// numastat tests the cell's raw bits against zero: any label counts as non-zero,
    /// and so would `-0.0`.
    fn is_non_zero(&self) -> bool {
        match self {
            Cell::Number(v) => v.to_bits() != 0,
            Cell::Text(_) => true,
            Cell::Empty | Cell::Rule(_) => false,
        }
    }

    fn format(&self, max_width: usize, decimal_places: usize) -> String {
        let mut text = match self {
            Cell::Empty => String::new(),
            Cell::Number(v) => format!("{v:.decimal_places$}"),
            Cell::Text(s) => s.clone(),
            Cell::Rule(c) => std::iter::repeat_n(*c, max_width.saturating_sub(GUTTER)).collect(),
        };
        if text.len() > max_width {
            let mut cut = max_width;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        text
    }
}

/// Space left after each cell's text.
const GUTTER: usize = 1;

/// How a column places its text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Justify {
    /// numastat's default (no column it prints uses it).
    #[default]
    Center,
    /// Labels.
    Left,
    /// Numbers.
    Right,
}

#[derive(Clone, Copy, Debug, Default)]
struct Marks {
    seen: bool,
    non_zero: bool,
    always_show: bool,
}

#[derive(Clone, Debug, Default)]
struct Column {
    marks: Marks,
    width: usize,
    decimal_places: usize,
    justify: Justify,
}

/// A table of header rows and columns around data cells.
#[derive(Clone, Debug)]
pub(super) struct VTable {
    header_rows: usize,
    header_cols: usize,
    rows: usize,
    cols: usize,
    cells: Vec<Cell>,
    /// Display order of the rows (sorting permutes this, not the cells).
    order: Vec<usize>,
    row_marks: Vec<Marks>,
    columns: Vec<Column>,
}

impl VTable {
    pub(super) fn new(
        header_rows: usize,
        header_cols: usize,
        data_rows: usize,
        data_cols: usize,
    ) -> VTable {
        let rows = header_rows + data_rows;
        let cols = header_cols + data_cols;
        VTable {
            header_rows,
            header_cols,
            rows,
            cols,
            cells: vec![Cell::Empty; rows * cols],
            order: (0..rows).collect(),
            row_marks: vec![Marks::default(); rows],
            columns: vec![Column::default(); cols],
        }
    }

    fn cell(&self, row: usize, col: usize) -> &Cell {
        &self.cells[row * self.cols + col]
    }

    pub(super) fn set(&mut self, row: usize, col: usize, cell: Cell) {
        self.cells[row * self.cols + col] = cell;
    }

    /// Adds to a cell, which becomes a number (numastat's `double_addto`).
    pub(super) fn add(&mut self, row: usize, col: usize, value: f64) {
        let cell = &mut self.cells[row * self.cols + col];
        let before = match cell {
            Cell::Number(v) => *v,
            _ => 0.0,
        };
        *cell = Cell::Number(before + value);
    }

    /// Every data cell becomes the number zero (numastat's `zero_table_data`).
    pub(super) fn zero_data(&mut self) {
        for row in self.header_rows..self.rows {
            for col in self.header_cols..self.cols {
                self.set(row, col, Cell::Number(0.0));
            }
        }
    }

    pub(super) fn set_width(&mut self, col: usize, width: usize) {
        self.columns[col].width = width;
    }

    pub(super) fn set_decimal_places(&mut self, col: usize, places: usize) {
        self.columns[col].decimal_places = places;
    }

    pub(super) fn set_justify(&mut self, col: usize, justify: Justify) {
        self.columns[col].justify = justify;
    }

    pub(super) fn always_show_row(&mut self, row: usize) {
        self.row_marks[row].always_show = true;
    }

    /// Widens (or narrows) a column to its longest text plus the gutter, within bounds.
    pub(super) fn fit_width(&mut self, col: usize, min_width: usize, max_width: usize) {
        let places = self.columns[col].decimal_places;
        let longest = (0..self.rows)
            .map(|row| self.cell(row, col))
            .filter(|cell| !matches!(cell, Cell::Rule(_)))
            .map(|cell| cell.format(max_width, places).len())
            .fold(min_width, usize::max);
        self.columns[col].width = (longest + GUTTER).min(max_width);
    }

    /// Orders data rows `first..=last` by column `col`, largest first (numastat's
    /// selection sort: ties keep the earlier row first only until it is swapped away).
    pub(super) fn sort_descending(&mut self, first: usize, last: usize, col: usize) {
        for ix in first..=last {
            let mut biggest = ix;
            for iy in ix + 1..=last {
                if self.cell(self.order[biggest], col).value()
                    < self.cell(self.order[iy], col).value()
                {
                    biggest = iy;
                }
            }
            self.order.swap(ix, biggest);
        }
    }

    /// The table as numastat prints it, folded to `screen_width`.
    pub(super) fn display(
        &mut self,
        out: &mut String,
        screen_width: usize,
        show_zero_rows: bool,
        show_zero_cols: bool,
    ) {
        let (mut some_seen, mut some_non_zero) = (false, false);
        for row in self.header_rows..self.rows {
            for col in self.header_cols..self.cols {
                let cell = &self.cells[row * self.cols + col];
                if matches!(cell, Cell::Empty | Cell::Rule(_)) {
                    continue;
                }
                some_seen = true;
                self.row_marks[row].seen = true;
                self.columns[col].marks.seen = true;
                if cell.is_non_zero() {
                    some_non_zero = true;
                    self.row_marks[row].non_zero = true;
                    self.columns[col].marks.non_zero = true;
                }
            }
        }
        if !some_seen {
            out.push_str("Table has no data.\n");
            return;
        }
        if !some_non_zero && !show_zero_rows && !show_zero_cols {
            out.push_str("Table has no non-zero data.\n");
            return;
        }
        // numastat never shows unseen rows or columns.
        let shown = |marks: &Marks, show_zero: bool| {
            marks.always_show || (marks.seen && (show_zero || marks.non_zero))
        };
        let mut col: Option<usize> = None;
        let mut data_col = self.header_cols;
        while data_col < self.cols {
            if !shown(&self.columns[data_col].marks, show_zero_cols) {
                data_col += 1;
                continue;
            }
            if col.is_some_and(|c| c > 0) {
                out.push('\n');
            }
            for row_ix in 0..self.rows {
                let row = self.order[row_ix];
                if row >= self.header_rows && !shown(&self.row_marks[row], show_zero_rows) {
                    continue;
                }
                let mut line_width = 0;
                for header in 0..self.header_cols {
                    self.print_cell(out, row, header);
                    line_width += self.columns[header].width;
                }
                let mut c = data_col;
                loop {
                    if shown(&self.columns[c].marks, show_zero_cols) {
                        self.print_cell(out, row, c);
                        line_width += self.columns[c].width;
                    }
                    c += 1;
                    if c >= self.cols || line_width + self.columns[c].width > screen_width {
                        break;
                    }
                }
                col = Some(c);
                out.push('\n');
            }
            data_col = col.unwrap_or(self.cols);
        }
    }

    fn print_cell(&self, out: &mut String, row: usize, col: usize) {
        let column = &self.columns[col];
        let width = column.width;
        let text = self.cell(row, col).format(width, column.decimal_places);
        let _ = match column.justify {
            Justify::Left => write!(out, "{text:<width$}"),
            Justify::Right => write!(out, "{text:>width$}"),
            Justify::Center => {
                let left = width.saturating_sub(text.len()).div_ceil(2);
                let right = width.saturating_sub(left + text.len());
                write!(out, "{:left$}{text}{:right$}", "", "")
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_by_two() -> VTable {
        let mut table = VTable::new(1, 1, 2, 2);
        table.set(0, 1, Cell::Text("A".into()));
        table.set(0, 2, Cell::Text("B".into()));
        table.set(1, 0, Cell::Text("one".into()));
        table.set(2, 0, Cell::Text("two".into()));
        table.set_width(0, 6);
        table.set_justify(0, Justify::Left);
        for col in 1..3 {
            table.set_width(col, 5);
            table.set_justify(col, Justify::Right);
        }
        table.add(1, 1, 1.0);
        table.add(2, 1, 3.0);
        table.add(2, 2, 0.0);
        table
    }

    #[test]
    fn zero_columns_hide_and_rows_sort() {
        let mut table = two_by_two();
        let mut out = String::new();
        table.display(&mut out, 80, true, true);
        assert_eq!(
            out,
            "          A    B\none       1     \ntwo       3    0\n"
        );
        let mut table = two_by_two();
        table.sort_descending(1, 2, 1);
        let mut out = String::new();
        table.display(&mut out, 80, false, false);
        assert_eq!(out, "          A\ntwo       3\none       1\n");
    }

    #[test]
    fn narrow_screens_fold_columns_into_sections() {
        let mut table = two_by_two();
        let mut out = String::new();
        // 6 + 5 fits, 6 + 5 + 5 does not: B moves to a second section.
        table.display(&mut out, 12, true, true);
        assert_eq!(
            out,
            "          A\none       1\ntwo       3\n\n          B\none        \ntwo       0\n"
        );
    }

    #[test]
    fn empty_tables_say_so() {
        let mut table = VTable::new(1, 1, 1, 1);
        let mut out = String::new();
        table.display(&mut out, 80, true, true);
        assert_eq!(out, "Table has no data.\n");
        table.add(1, 1, 0.0);
        let mut out = String::new();
        table.display(&mut out, 80, false, false);
        assert_eq!(out, "Table has no non-zero data.\n");
    }

    #[test]
    fn cells_are_cut_to_their_width_and_rules_leave_a_gutter() {
        assert_eq!(Cell::Text("abcdefgh".into()).format(4, 0), "abcd");
        assert_eq!(Cell::Rule('-').format(4, 0), "---");
        assert_eq!(Cell::Number(2.0 / 3.0).format(16, 2), "0.67");
    }
}
