//! Charts a reader can read on their own (issue 13 §6): a title, axes with their units, tick
//! labels, a legend naming each line, and a footnote with the machine and the commit. Text is
//! drawn with DejaVu Sans, embedded in the binary (`assets/DejaVuSans.ttf`, Bitstream Vera
//! licence in `assets/DejaVuSans-LICENSE.txt`), so a chart looks the same on a machine without
//! fonts.

use std::path::Path;
use std::sync::Once;

use anyhow::anyhow;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";
/// Width and height of every chart, in pixels.
pub const SIZE: (u32, u32) = (960, 600);

/// Line colours, in series order (distinguishable in colour and in grey).
const COLOURS: [RGBColor; 8] = [
    RGBColor(200, 30, 30),
    RGBColor(30, 80, 200),
    RGBColor(30, 150, 60),
    RGBColor(240, 150, 0),
    RGBColor(120, 40, 160),
    RGBColor(0, 150, 160),
    RGBColor(90, 90, 90),
    RGBColor(170, 110, 40),
];

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_err() {
            tracing::error!("the embedded font does not load: charts will lack text");
        }
    });
}

/// How an axis maps its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    Linear,
    /// Powers of ten evenly spaced (sizes, rates spanning decades).
    Log,
}

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's name for it.
    pub name: String,
    /// Its points, in x order; non-finite or (on a log axis) non-positive ones are left out.
    pub points: Vec<(f64, f64)>,
}

/// A chart of lines, or of bars when [`Chart::bars`] is set.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Said at the top.
    pub title: String,
    /// The x axis: what and in which unit.
    pub x_label: String,
    /// The y axis: what and in which unit.
    pub y_label: String,
    /// The x axis's scale.
    pub x_scale: Scale,
    /// The y axis's scale.
    pub y_scale: Scale,
    /// The lines.
    pub series: Vec<Series>,
    /// Bars instead of lines: one named bar per entry, heights on the y axis.
    pub bars: Vec<(String, f64)>,
    /// Small print at the bottom: the machine and the commit.
    pub footnote: String,
}

impl Chart {
    /// Writes the chart as a PNG of [`SIZE`].
    ///
    /// # Errors
    /// The file cannot be written, or nothing can be drawn.
    pub fn save_png(&self, path: &Path) -> anyhow::Result<()> {
        register_font();
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        self.draw(&root)?;
        root.present().map_err(|e| anyhow!("{e}"))?;
        Ok(())
    }

    /// Draws the chart into an RGB buffer of [`SIZE`] (3 bytes per pixel, rows top first): what
    /// the tests look at.
    ///
    /// # Errors
    /// Nothing can be drawn.
    #[cfg(test)]
    pub fn render_rgb(&self) -> anyhow::Result<Vec<u8>> {
        register_font();
        let mut buf = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(|e| anyhow!("{e}"))?;
        }
        Ok(buf)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, plotters::coord::Shift>,
    ) -> anyhow::Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let (_, h) = root.dim_in_pixel();
        let (body, foot) = root.split_vertically(h - 28);
        foot.draw_text(
            &self.footnote,
            &(FAMILY, 13).into_font().color(&RGBColor(80, 80, 80)),
            (12, 6),
        )
        .map_err(|e| anyhow!("{e}"))?;
        if !self.bars.is_empty() {
            return self.draw_bars(&body);
        }
        // A log axis spanning less than a decade and a half would show one tick label or
        // none: such an axis is drawn linear.
        let (x, y) = self.ranges();
        let wide = |r: &std::ops::Range<f64>| r.start > 0.0 && r.end / r.start >= 30.0;
        let chart = Chart {
            x_scale: if wide(&x) {
                self.x_scale
            } else {
                Scale::Linear
            },
            y_scale: if wide(&y) {
                self.y_scale
            } else {
                Scale::Linear
            },
            ..self.clone()
        };
        let (x, y) = chart.ranges();
        match (chart.x_scale, chart.y_scale) {
            (Scale::Log, Scale::Log) => chart.draw_lines(&body, x.log_scale(), y.log_scale()),
            (Scale::Log, Scale::Linear) => chart.draw_lines(&body, x.log_scale(), y),
            (Scale::Linear, Scale::Log) => chart.draw_lines(&body, x, y.log_scale()),
            (Scale::Linear, Scale::Linear) => chart.draw_lines(&body, x, y),
        }
    }

    /// The points that can be drawn on the chart's scales.
    fn drawable(&self, s: &Series) -> Vec<(f64, f64)> {
        let ok = |v: f64, scale: Scale| v.is_finite() && (scale == Scale::Linear || v > 0.0);
        s.points
            .iter()
            .copied()
            .filter(|&(x, y)| ok(x, self.x_scale) && ok(y, self.y_scale))
            .collect()
    }

    /// Ranges holding every drawable point with a margin (a decade's fraction on log axes).
    fn ranges(&self) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
        let points: Vec<(f64, f64)> = self.series.iter().flat_map(|s| self.drawable(s)).collect();
        let span = |vals: Vec<f64>, scale: Scale| -> std::ops::Range<f64> {
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if !lo.is_finite() {
                return if scale == Scale::Log {
                    1.0..10.0
                } else {
                    0.0..1.0
                };
            }
            match scale {
                Scale::Log => (lo / 1.6)..(hi * 1.6).max(lo * 2.0),
                Scale::Linear => {
                    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.05).max(1e-9);
                    (lo.min(0.0))..(hi + pad)
                }
            }
        };
        (
            span(points.iter().map(|p| p.0).collect(), self.x_scale),
            span(points.iter().map(|p| p.1).collect(), self.y_scale),
        )
    }

    fn draw_lines<DB, X, Y>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        x: X,
        y: Y,
    ) -> anyhow::Result<()>
    where
        DB: DrawingBackend,
        DB::ErrorType: 'static,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e}");
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, (FAMILY, 24))
            .margin(16)
            .x_label_area_size(52)
            .y_label_area_size(86)
            .build_cartesian_2d(x, y)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 17))
            .light_line_style(RGBColor(235, 235, 235))
            .x_label_formatter(&|v| human(*v))
            .y_label_formatter(&|v| human(*v))
            .draw()
            .map_err(e)?;
        for (i, s) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points = self.drawable(s);
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(3)))
                .map_err(e)?
                .label(&s.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(3))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 4, colour.filled())),
                )
                .map_err(e)?;
        }
        chart
            .configure_series_labels()
            .label_font((FAMILY, 15))
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(160, 160, 160))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(e)?;
        Ok(())
    }

    fn draw_bars<DB>(&self, area: &DrawingArea<DB, plotters::coord::Shift>) -> anyhow::Result<()>
    where
        DB: DrawingBackend,
        DB::ErrorType: 'static,
    {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e}");
        let n = self.bars.len();
        let top = self
            .bars
            .iter()
            .map(|b| b.1)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
            * 1.4; // room for the legend above the bars
        let x: RangedCoordf64 = (-0.5..n as f64 - 0.5).into();
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, (FAMILY, 24))
            .margin(16)
            .x_label_area_size(52)
            .y_label_area_size(86)
            .build_cartesian_2d(x, 0.0..top.max(1e-9))
            .map_err(e)?;
        let names: Vec<String> = self.bars.iter().map(|b| b.0.clone()).collect();
        let label = move |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&label)
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .y_label_formatter(&|v| human(*v))
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 17))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(e)?;
        for (i, (name, v)) in self.bars.iter().enumerate() {
            if !v.is_finite() {
                continue;
            }
            let colour = COLOURS[i % COLOURS.len()];
            let x = i as f64;
            chart
                .draw_series([Rectangle::new(
                    [(x - 0.3, 0.0), (x + 0.3, *v)],
                    colour.filled(),
                )])
                .map_err(e)?
                .label(format!("{name}: {}", human(*v)))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .label_font((FAMILY, 15))
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(160, 160, 160))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(e)?;
        Ok(())
    }
}

/// A tick label: 1 K / 64 K / 1.5 M style for large values, plain below 1000.
pub fn human(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if x.abs() >= 100.0 || x.fract().abs() < 1e-9 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.digits$}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(with_text: bool) -> Chart {
        let t = |s: &str| {
            if with_text {
                s.to_string()
            } else {
                String::new()
            }
        };
        Chart {
            title: t("Throughput by message size"),
            x_label: t("message size (bytes)"),
            y_label: t("throughput (MB/s)"),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            series: vec![
                Series {
                    name: t("viastack reliable-fifo"),
                    points: vec![(1024.0, 1800.0), (65536.0, 3300.0)],
                },
                Series {
                    name: t("JGroups UNICAST4"),
                    points: vec![(1024.0, 530.0), (65536.0, 1700.0)],
                },
            ],
            bars: vec![],
            footnote: t("Intel Xeon, 2 cores, Linux 6.1, commit abc1234"),
        }
    }

    /// Pixels darker than mid-grey in rows `rows` (text is black or dark grey).
    fn dark(buf: &[u8], rows: std::ops::Range<u32>) -> usize {
        let w = SIZE.0 as usize;
        rows.flat_map(|r| (0..w).map(move |c| (r as usize * w + c) * 3))
            .filter(|&i| buf[i] < 110 && buf[i + 1] < 110 && buf[i + 2] < 110)
            .count()
    }

    #[test]
    fn a_chart_draws_its_title_legend_labels_and_footnote() {
        let with = chart(true).render_rgb().unwrap();
        let without = chart(false).render_rgb().unwrap();
        let h = SIZE.1;
        // Title strip, legend (upper left, below the title), footnote strip.
        for (what, rows) in [
            ("title", 0..44),
            ("legend", 60..140),
            ("footnote", h - 26..h),
        ] {
            let (a, b) = (dark(&with, rows.clone()), dark(&without, rows));
            assert!(
                a > b + 150,
                "{what}: {a} dark pixels with text, {b} without"
            );
        }
        // The whole chart: tick labels and axis descriptions too.
        assert!(dark(&with, 0..h) > dark(&without, 0..h) + 2_000);
    }

    #[test]
    fn a_bar_chart_names_its_bars() {
        let mut c = chart(true);
        c.series.clear();
        c.bars = vec![("compiled".into(), 3.0e6), ("handwritten".into(), 3.2e6)];
        let with = c.render_rgb().unwrap();
        c.bars = vec![(String::new(), 3.0e6), (String::new(), 3.2e6)];
        c.title.clear();
        let without = c.render_rgb().unwrap();
        assert!(dark(&with, 0..SIZE.1) > dark(&without, 0..SIZE.1) + 500);
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(human(1024.0), "1.02k");
        assert_eq!(human(65536.0), "65.5k");
        assert_eq!(human(1_800_000.0), "1.80M");
        assert_eq!(human(3.0), "3");
        assert_eq!(human(0.25), "0.25");
    }
}
