pub mod chart;

pub fn placeholder() {}
