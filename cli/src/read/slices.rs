//! The per-thread slice stack: duration begins waiting for their ends, each thread's innermost
//! last. An end closes the innermost open begin of its thread (whatever name the end record
//! gives), as Chrome's and Perfetto's importers pair them. Bounded for crafted input: at most
//! [`MAX_THREADS`] threads with open slices, [`MAX_DEPTH`] open slices a thread and
//! [`MAX_OPEN`] in all; a begin beyond any of them is not kept but counted, and the end that
//! matches it is consumed, so the pairing of the others stays right.

use std::collections::HashSet;
use std::rc::Rc;

use super::bounded::FastState;

use fxtrace_format::Thread;

use super::bounded::BoundedMap;

/// Most threads with open slices kept at once.
pub const MAX_THREADS: usize = 65_536;
/// Most open slices kept on one thread.
pub const MAX_DEPTH: usize = 4096;
/// Most open slices kept over all threads.
pub const MAX_OPEN: usize = 1 << 18;

/// An open duration: when it began, its category and name (one shared copy of each text),
/// and what the reader attaches to it.
#[derive(Debug)]
pub struct Open<T> {
    /// Begin time, ns.
    pub begin_ns: u64,
    /// Category.
    pub category: Rc<str>,
    /// Name.
    pub name: Rc<str>,
    /// The reader's own data (arguments kept, children's times, …).
    pub data: T,
}

/// One thread's open slices.
#[derive(Debug)]
struct Stack<T> {
    open: Vec<Open<T>>,
    /// Begins above [`MAX_DEPTH`] not kept: the next ends match them.
    excess: u64,
}

/// What an end matched.
#[derive(Debug)]
pub enum Closed<T> {
    /// The innermost open slice of the thread, now closed.
    Slice(Open<T>),
    /// A begin that was not kept (beyond a bound): nothing to report.
    NotKept,
    /// No begin is open on the thread: an unmatched end.
    Unmatched,
}

/// The open slices of every thread.
#[derive(Debug)]
pub struct Slices<T> {
    stacks: BoundedMap<Thread, Stack<T>>,
    texts: SharedTexts,
    /// Slices open, over all threads.
    open: usize,
    /// Begins not kept (beyond [`MAX_THREADS`], [`MAX_DEPTH`] or [`MAX_OPEN`]).
    pub not_kept: u64,
}

impl<T> Default for Slices<T> {
    fn default() -> Self {
        Slices {
            stacks: BoundedMap::new(MAX_THREADS),
            texts: SharedTexts::default(),
            open: 0,
            not_kept: 0,
        }
    }
}

impl<T> Slices<T> {
    /// No slice open.
    pub fn new() -> Self {
        Self::default()
    }

    /// The one shared copy of `text` the slices use (a reader keying its own tables by the
    /// copy's address gets the same key for the same text while a slice or the reader holds
    /// it).
    pub fn text(&mut self, text: &str) -> Rc<str> {
        self.texts.get(text)
    }

    /// A duration begins on `thread`; `false` when it was not kept (counted).
    pub fn begin(
        &mut self,
        thread: Thread,
        begin_ns: u64,
        category: &str,
        name: &str,
        data: T,
    ) -> bool {
        let Some(stack) = self.stacks.entry_with(thread, || Stack {
            open: Vec::new(),
            excess: 0,
        }) else {
            self.not_kept += 1;
            return false;
        };
        if stack.open.len() >= MAX_DEPTH || stack.excess > 0 || self.open >= MAX_OPEN {
            stack.excess += 1;
            self.not_kept += 1;
            return false;
        }
        let (category, name) = (self.texts.get(category), self.texts.get(name));
        self.open += 1;
        if stack.open.capacity() == 0 {
            // Most threads hold one slice at a time: room for one, not the usual four.
            stack.open.reserve_exact(1);
        }
        stack.open.push(Open {
            begin_ns,
            category,
            name,
            data,
        });
        true
    }

    /// A duration ends on `thread`: closes its innermost open slice.
    pub fn end(&mut self, thread: Thread) -> Closed<T> {
        let Some(stack) = self.stacks.get_mut(&thread) else {
            // A begin refused for a full map left no stack: its end is not an orphan.
            return if self.stacks.refused() > 0 {
                Closed::NotKept
            } else {
                Closed::Unmatched
            };
        };
        if stack.excess > 0 {
            stack.excess -= 1;
            if stack.excess == 0 && stack.open.is_empty() {
                self.stacks.remove(&thread);
            }
            return Closed::NotKept;
        }
        let Some(slice) = stack.open.pop() else {
            return Closed::Unmatched;
        };
        self.open -= 1;
        if stack.open.is_empty() {
            self.stacks.remove(&thread);
        }
        Closed::Slice(slice)
    }

    /// The innermost open slice of `thread`.
    pub fn innermost_mut(&mut self, thread: Thread) -> Option<&mut Open<T>> {
        self.stacks.get_mut(&thread)?.open.last_mut()
    }

    /// How many slices are open on `thread`.
    pub fn depth(&self, thread: Thread) -> usize {
        self.stacks.get(&thread).map_or(0, |s| s.open.len())
    }

    /// Slices open, over all threads.
    pub fn open(&self) -> usize {
        self.open
    }

    /// Threads with a slice open.
    pub fn threads(&self) -> usize {
        self.stacks.len()
    }

    /// Every slice still open, by thread (in thread order), innermost last: the trace ended
    /// before them.
    pub fn drain(&mut self) -> Vec<(Thread, Vec<Open<T>>)> {
        self.open = 0;
        let mut open: Vec<(Thread, Vec<Open<T>>)> =
            self.stacks.drain().map(|(t, s)| (t, s.open)).collect();
        open.sort_by_key(|(thread, _)| *thread);
        open
    }
}

/// The category and name texts of open durations, one copy of each text shared by all of
/// them (a trace's strings are up to 32 KB each, and one begin event of 16 bytes can name
/// two of them: a copy per open duration made memory grow thousands of times faster than
/// the input). When the set reaches its sweep size (at first [`Self::MAX_TEXTS`]), the texts
/// no open duration holds are forgotten, and the next sweep waits until the set has doubled
/// (so that texts all in use, 100 000 open durations of distinct names, do not make every
/// new text sweep the whole set): the set holds at most twice the texts in use at the last
/// sweep, or `MAX_TEXTS`, each once (after a peak of open durations, as many texts no
/// duration holds any more may wait for the next sweep).
#[derive(Debug)]
pub struct SharedTexts {
    texts: HashSet<Rc<str>, FastState>,
    sweep_at: usize,
    /// Sweeps so far.
    sweeps: u64,
}

impl Default for SharedTexts {
    fn default() -> Self {
        SharedTexts {
            texts: HashSet::default(),
            sweep_at: Self::MAX_TEXTS,
            sweeps: 0,
        }
    }
}

impl SharedTexts {
    /// Texts remembered beyond those in use.
    pub const MAX_TEXTS: usize = 4096;

    /// The shared copy of `text`.
    pub fn get(&mut self, text: &str) -> Rc<str> {
        if let Some(shared) = self.texts.get(text) {
            return shared.clone();
        }
        if self.texts.len() >= self.sweep_at {
            // Held by an open duration: more than this set's own reference.
            self.texts.retain(|text| Rc::strong_count(text) > 1);
            self.sweep_at = (2 * self.texts.len()).max(Self::MAX_TEXTS);
            self.sweeps += 1;
        }
        let shared: Rc<str> = Rc::from(text);
        self.texts.insert(shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thread = Thread { pid: 1, tid: 2 };

    #[test]
    fn an_end_closes_the_innermost_begin_of_its_thread() {
        let mut s: Slices<u32> = Slices::new();
        assert!(s.begin(T, 10, "c", "outer", 1));
        assert!(s.begin(T, 20, "c", "inner", 2));
        assert!(matches!(s.end(T), Closed::Slice(o) if &*o.name == "inner" && o.data == 2));
        assert_eq!(s.depth(T), 1);
        assert!(matches!(s.end(T), Closed::Slice(o) if o.begin_ns == 10));
        assert!(matches!(s.end(T), Closed::Unmatched));
        assert_eq!(s.threads(), 0, "a thread with nothing open costs nothing");
    }

    #[test]
    fn begins_beyond_the_depth_are_counted_and_their_ends_consumed() {
        let mut s: Slices<()> = Slices::new();
        for i in 0..MAX_DEPTH + 3 {
            s.begin(T, i as u64, "c", "n", ());
        }
        assert_eq!((s.depth(T), s.not_kept), (MAX_DEPTH, 3));
        for _ in 0..3 {
            assert!(matches!(s.end(T), Closed::NotKept));
        }
        assert!(matches!(s.end(T), Closed::Slice(o) if o.begin_ns == MAX_DEPTH as u64 - 1));
    }

    #[test]
    fn shared_texts_sweep_rarely_when_every_text_is_in_use() {
        // 100 000 distinct names of open durations: every text stays in use.
        let mut texts = SharedTexts::default();
        let held: Vec<_> = (0..100_000)
            .map(|i| texts.get(&format!("name {i}")))
            .collect();
        assert_eq!(texts.texts.len(), held.len());
        // Sweeps at 4096, then each time the set doubled: a handful, not one per text.
        assert!(texts.sweeps <= 6, "{} sweeps", texts.sweeps);
        // Texts no longer in use are forgotten at the next sweep.
        drop(held);
        for i in 0..texts.sweep_at {
            drop(texts.get(&format!("other {i}")));
        }
        assert!(texts.texts.len() <= SharedTexts::MAX_TEXTS.max(texts.sweep_at));
    }

    #[test]
    fn open_durations_share_one_copy_of_each_text() {
        let mut texts = SharedTexts::default();
        let a = texts.get("a long category");
        let b = texts.get("a long category");
        assert!(Rc::ptr_eq(&a, &b));
        assert_eq!(&*texts.get("other"), "other");
        for i in 0..SharedTexts::MAX_TEXTS {
            texts.get(&i.to_string());
        }
        assert!(texts.texts.len() <= SharedTexts::MAX_TEXTS, "bounded");
        assert_eq!(&*a, "a long category", "kept by the open durations");
        // Texts still held by open durations stay shared, however many others pass through.
        let held: Vec<Rc<str>> = (0..SharedTexts::MAX_TEXTS + 1)
            .map(|i| texts.get(&format!("held {i}")))
            .collect();
        for (i, text) in held.iter().enumerate() {
            assert!(Rc::ptr_eq(text, &texts.get(&format!("held {i}"))), "{i}");
        }
    }
}
