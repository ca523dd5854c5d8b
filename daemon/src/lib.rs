//! recalld
