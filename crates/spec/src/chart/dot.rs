//! Graphviz rendering of a chart.
