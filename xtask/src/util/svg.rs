//! The one SVG writer of the reports: a canvas with text, rectangles, lines, polylines
//! and a legend, escaped and formatted in one place. Each report lays out its own
//! chart (bars, grouped bars, lines) on it.

use std::fmt::Write as _;

/// Colours for series, in order.
pub(crate) const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f",
];

/// How a line is drawn: colour, width, dashed or solid.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stroke<'a> {
    pub(crate) colour: &'a str,
    pub(crate) width: f64,
    pub(crate) dashed: bool,
}

impl Stroke<'_> {
    /// The attributes of an SVG element drawn with this stroke.
    fn attributes(&self) -> String {
        let dash = if self.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        format!(
            "fill=\"none\" stroke=\"{}\" stroke-width=\"{:.1}\"{dash}",
            self.colour, self.width
        )
    }
}

/// How text is anchored at its x.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

/// An SVG document being drawn.
pub(crate) struct Svg {
    width: f64,
    height: f64,
    body: String,
}

impl Svg {
    /// A white canvas with a title at the top left.
    pub(crate) fn new(width: f64, height: f64, title: &str) -> Svg {
        let mut svg = Svg {
            width,
            height,
            body: String::new(),
        };
        svg.body
            .push_str("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        let _ = writeln!(
            svg.body,
            "<text x=\"8\" y=\"20\" font-size=\"14\">{}</text>",
            escape(title)
        );
        svg
    }

    /// Text at (x, y).
    pub(crate) fn text(&mut self, x: f64, y: f64, anchor: Anchor, text: &str) {
        let anchor = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let _ = writeln!(
            self.body,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>",
            escape(text)
        );
    }

    /// Text rotated a quarter turn counter-clockwise about (x, y): a y-axis label.
    pub(crate) fn vertical_text(&mut self, x: f64, y: f64, text: &str) {
        let _ = writeln!(
            self.body,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" transform=\"rotate(-90 {x:.1} {y:.1})\" text-anchor=\"middle\">{}</text>",
            escape(text)
        );
    }

    /// A filled rectangle with a tooltip.
    pub(crate) fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, fill: &str, tip: &str) {
        let _ = writeln!(
            self.body,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"><title>{}</title></rect>",
            width.max(0.0),
            height.max(0.0),
            escape(tip)
        );
    }

    /// A straight line; `dashed` for reference lines.
    pub(crate) fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, dashed: bool) {
        let dash = if dashed {
            " stroke-dasharray=\"4\""
        } else {
            ""
        };
        let _ = writeln!(
            self.body,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{stroke}\"{dash}/>",
            from.0, from.1, to.0, to.1
        );
    }

    /// A line through the points, 2 wide and solid.
    pub(crate) fn polyline(&mut self, points: &[(f64, f64)], colour: &str) {
        self.stroked_polyline(
            points,
            Stroke {
                colour,
                width: 2.0,
                dashed: false,
            },
            "",
        );
    }

    /// A line through the points with `stroke`, and a tooltip.
    pub(crate) fn stroked_polyline(
        &mut self,
        points: &[(f64, f64)],
        stroke: Stroke<'_>,
        tip: &str,
    ) {
        let points: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.body,
            "<polyline {} points=\"{}\"><title>{}</title></polyline>",
            stroke.attributes(),
            points.join(" "),
            escape(tip)
        );
    }

    /// A legend of lines: one short stroke and name per series, from (x, y) down.
    pub(crate) fn line_legend(&mut self, x: f64, y: f64, entries: &[(&str, Stroke<'_>)]) {
        for (i, (name, stroke)) in entries.iter().enumerate() {
            let row = y + 18.0 * i as f64;
            let _ = writeln!(
                self.body,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" {}/>",
                row + 5.0,
                x + 22.0,
                row + 5.0,
                stroke.attributes()
            );
            self.text(x + 28.0, row + 10.0, Anchor::Start, name);
        }
    }

    /// The axes of a chart whose plot area spans `left..right` and `top..bottom`: the
    /// two lines, the x label at the foot of the canvas and the y label up its left.
    pub(crate) fn axes(
        &mut self,
        (left, top): (f64, f64),
        (right, bottom): (f64, f64),
        x_label: &str,
        y_label: &str,
    ) {
        self.line((left, bottom), (right, bottom), "black", false);
        self.line((left, top), (left, bottom), "black", false);
        self.text(
            (left + right) / 2.0,
            self.height - 12.0,
            Anchor::Middle,
            x_label,
        );
        self.vertical_text(14.0, (top + bottom) / 2.0, y_label);
    }

    /// A legend: one swatch and name per series, from (x, y) down.
    pub(crate) fn legend(&mut self, x: f64, y: f64, names: &[&str]) {
        for (i, name) in names.iter().enumerate() {
            let row = y + 18.0 * i as f64;
            let colour = PALETTE[i % PALETTE.len()];
            let _ = writeln!(
                self.body,
                "<rect x=\"{x:.1}\" y=\"{row:.1}\" width=\"10\" height=\"10\" fill=\"{colour}\"/>"
            );
            self.text(x + 14.0, row + 10.0, Anchor::Start, name);
        }
    }

    /// The document.
    pub(crate) fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n{}</svg>\n",
            self.width, self.height, self.body
        )
    }
}

/// Text as SVG character data.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_with_escaped_text() {
        let mut svg = Svg::new(100.0, 50.0, "a <b> & c");
        svg.rect(1.0, 2.0, 3.0, -4.0, PALETTE[0], "x");
        svg.polyline(&[(0.0, 1.0), (2.0, 3.0)], "red");
        let text = svg.finish();
        assert!(text
            .starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" height=\"50\""));
        assert!(text.contains(">a &lt;b&gt; &amp; c</text>"));
        assert!(
            text.contains("height=\"0.0\""),
            "negative sizes clamp: {text}"
        );
        assert!(text.contains("stroke-width=\"2.0\" points=\"0.0,1.0 2.0,3.0\""));
        assert!(text.ends_with("</svg>\n"));
    }
}
