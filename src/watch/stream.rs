//! Reading one watch response line by line: what each line means for the pipeline, and
//! where the watch stands after it. Entry point: [`Stream::on_line`].
//!
//! The position (the resourceVersion the next watch starts from) moves only with what was
//! read and passed on: an object seen on the watch, a bookmark, the end of a streaming
//! list's initial events. A line that cannot be read is skipped and never moves it, so a
//! garbled line cannot make the watch skip or replay changes.

use bytes::Bytes;

use super::Observed;
use super::parse::{ParseError, WatchLine, parse_watch_line};
use crate::classify::Scope;

/// What one line of a watch response comes to.
#[derive(Debug)]
pub enum LineOutcome {
    /// Pass this on to the pipeline.
    Emit(Observed),
    /// Nothing to pass on (a bookmark among a streaming list's initial events).
    Nothing,
    /// The line cannot be read: it is skipped, and the position stays where it was.
    Skipped(ParseError),
    /// `410 Gone`: the position is too old; list again.
    Gone,
    /// The apiserver ended the watch with another error status.
    Failed { code: u16, message: String },
}

/// The state of one watch response being read.
pub struct Stream<'a> {
    scope: Scope,
    /// Where the watch stands; shared with the watch loop, which resumes from it.
    position: &'a mut Option<String>,
    /// A streaming list's initial events are still coming (they are `Listed`, not changes).
    in_initial: bool,
    /// Objects listed so far by a streaming list.
    listed: usize,
}

impl<'a> Stream<'a> {
    /// A response of `scope`'s watch; `initial` when it is a streaming list.
    pub fn new(scope: Scope, position: &'a mut Option<String>, initial: bool) -> Stream<'a> {
        Stream {
            scope,
            position,
            in_initial: initial,
            listed: 0,
        }
    }

    /// Where the watch stands.
    pub fn position(&self) -> Option<&str> {
        self.position.as_deref()
    }

    /// Whether the streaming list's initial events are still coming (a failure now means
    /// listing again).
    pub fn in_initial(&self) -> bool {
        self.in_initial
    }

    /// Reads one line (without its newline).
    pub fn on_line(&mut self, line: Bytes) -> LineOutcome {
        let parsed = match parse_watch_line(line) {
            Ok(p) => p,
            Err(e) => return LineOutcome::Skipped(e),
        };
        let scope = self.scope.clone();
        let item = match parsed {
            WatchLine::Added(object) if self.in_initial => {
                self.listed += 1;
                Observed::Listed { scope, object }
            }
            WatchLine::Added(object) | WatchLine::Modified(object) => {
                *self.position = Some(object.rv.clone());
                Observed::Applied { scope, object }
            }
            WatchLine::Deleted(object) => {
                *self.position = Some(object.rv.clone());
                Observed::Deleted { scope, object }
            }
            WatchLine::Bookmark { rv, initial_end } if self.in_initial && initial_end => {
                self.in_initial = false;
                *self.position = Some(rv.clone());
                tracing::info!(scope = %scope.label(), objects = self.listed, resource_version = %rv, "list complete (streamed)");
                Observed::ListDone { scope, rv }
            }
            WatchLine::Bookmark { .. } if self.in_initial => return LineOutcome::Nothing,
            WatchLine::Bookmark { rv, .. } => {
                *self.position = Some(rv.clone());
                Observed::Bookmark { scope, rv }
            }
            WatchLine::Error { code: 410, .. } => return LineOutcome::Gone,
            WatchLine::Error { code, message } => return LineOutcome::Failed { code, message },
        };
        LineOutcome::Emit(item)
    }
}
