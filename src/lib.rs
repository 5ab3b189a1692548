pub mod format;

pub fn placeholder() {}
