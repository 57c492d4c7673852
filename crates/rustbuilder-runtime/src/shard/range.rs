//! The hash space and its ranges: the API server's 64-bit FNV-1a hash of an object's uid, ranges of
//! that space, sets of ranges, and their wire form (`shardSelector`).

use std::fmt;
use std::str::FromStr;

/// The size of the hash space, 2⁶⁴: the exclusive end of the last range.
const SPACE: u128 = 1 << 64;

/// The field the API server hashes in a `shardRange(…)` of a selector.
const SELECTOR_FIELD: &str = "object.metadata.uid";

/// The 64-bit FNV-1a hash of `uid`'s bytes: what the API server computes for
/// `shardRange(object.metadata.uid, …)`, so a client that filters by it keeps exactly the objects
/// the server would send.
///
/// ```
/// use rustbuilder_runtime::shard::hash;
///
/// assert_eq!(hash("abc"), 0xe71f_a219_0541_574b);
/// ```
pub fn hash(uid: &str) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    uid.bytes().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The hashes `start..end` (end excluded, at most 2⁶⁴), never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Range {
    start: u64,
    end: u128,
}

impl Range {
    /// The whole hash space.
    pub const FULL: Range = Range {
        start: 0,
        end: SPACE,
    };

    /// The hashes from `start` up to `end` (excluded). `None` if the range would be empty or `end`
    /// lies past 2⁶⁴.
    pub fn new(start: u64, end: u128) -> Option<Range> {
        (u128::from(start) < end && end <= SPACE).then_some(Range { start, end })
    }

    /// Part `index` of the hash space cut into `count` parts of (nearly) equal size, in order: the
    /// range member `index` of `count` owns. Parts differ in size by at most one hash.
    ///
    /// ```
    /// use rustbuilder_runtime::shard::Range;
    ///
    /// let halves = [Range::part(0, 2), Range::part(1, 2)];
    /// assert_eq!(halves[0].to_string(), "0x0000000000000000-0x8000000000000000");
    /// assert_eq!(halves[1].to_string(), "0x8000000000000000-0x10000000000000000");
    /// ```
    ///
    /// # Panics
    /// If `index >= count`.
    pub fn part(index: usize, count: usize) -> Range {
        assert!(index < count, "part {index} of {count}");
        let bound = |i: usize| SPACE * i as u128 / count as u128;
        Range {
            start: u64::try_from(bound(index)).expect("below 2^64"),
            end: bound(index + 1),
        }
    }

    /// Bucket `top` of the 256 the hash space is cut into for assignment: the hashes whose top byte
    /// is `top` (the same buckets as [`BUCKET_LABEL`](super::BUCKET_LABEL)'s).
    pub fn bucket(top: u8) -> Range {
        Range {
            start: u64::from(top) << 56,
            end: (u128::from(top) + 1) << 56,
        }
    }

    /// The first hash of the range.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The hash after the last one of the range (2⁶⁴ for a range that ends the space).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u64) -> bool {
        self.start <= hash && u128::from(hash) < self.end
    }

    /// Whether the two ranges share a hash.
    pub fn overlaps(&self, other: &Range) -> bool {
        u128::from(self.start) < other.end && u128::from(other.start) < self.end
    }

    /// The range as a term of a `shardSelector`:
    /// `shardRange(object.metadata.uid, '0x…', '0x…')`.
    pub fn selector(&self) -> String {
        let (start, end) = (hex(self.start.into()), hex(self.end));
        format!("shardRange({SELECTOR_FIELD}, '{start}', '{end}')")
    }
}

/// A bound as the API server writes it: `0x` and 16 lowercase hex digits (17 for 2⁶⁴).
fn hex(bound: u128) -> String {
    format!("0x{bound:016x}")
}

fn parse_hex(text: &str) -> Option<u128> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 17 {
        return None;
    }
    u128::from_str_radix(digits, 16).ok()
}

/// `0x<start>-0x<end>`, the form [`Ranges`] publishes in a Lease annotation.
impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", hex(self.start.into()), hex(self.end))
    }
}

/// A set of hashes made of [`Range`]s: what one member of a shard group works on. Kept sorted and
/// merged, so two sets of the same hashes are equal.
///
/// ```
/// use rustbuilder_runtime::shard::{Range, Ranges};
///
/// let first = Ranges::from(Range::part(0, 3));
/// let second = Ranges::from(Range::part(1, 3));
/// assert!(!first.overlaps(&second));
///
/// let both = first.union(&second);
/// assert_eq!(both.ranges().len(), 1, "adjacent ranges merge");
/// assert!(both.contains(0x5555_5555_5555_5555));
/// assert_eq!(
///     both.selector().unwrap(),
///     "shardRange(object.metadata.uid, '0x0000000000000000', '0xaaaaaaaaaaaaaaaa')"
/// );
/// assert_eq!(both.difference(&first), second);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ranges(Vec<Range>);

impl Ranges {
    /// No hash at all.
    pub fn none() -> Ranges {
        Ranges(Vec::new())
    }

    /// Every hash.
    pub fn full() -> Ranges {
        Ranges(vec![Range::FULL])
    }

    /// The set of the hashes of `ranges`, which may overlap and come in any order.
    pub fn new(ranges: impl IntoIterator<Item = Range>) -> Ranges {
        let mut ranges: Vec<Range> = ranges.into_iter().collect();
        ranges.sort();
        let mut merged: Vec<Range> = Vec::with_capacity(ranges.len());
        for range in ranges {
            match merged.last_mut() {
                Some(last) if u128::from(range.start) <= last.end => {
                    last.end = last.end.max(range.end);
                }
                _ => merged.push(range),
            }
        }
        Ranges(merged)
    }

    /// The part of the hash space `member` works on in a group of `members` (`member` among them):
    /// each of the 256 [`Range::bucket`]s goes to the member that scores highest on it (rendezvous
    /// hashing). Every member computes the same split from the same names, the parts never overlap
    /// and together cover everything, and when a member comes or goes only the buckets it gains or
    /// had move: a fourth member takes about a quarter of the space from the three before, a member
    /// that leaves hands its part to the others, and no bucket moves between two that stay.
    ///
    /// ```
    /// use rustbuilder_runtime::shard::Ranges;
    ///
    /// let three = ["a", "b", "c"];
    /// let parts: Vec<Ranges> = three.iter().map(|m| Ranges::assigned(&three, m)).collect();
    /// let all = parts.iter().fold(Ranges::none(), |all, part| all.union(part));
    /// assert!(all.is_full() && !parts[0].overlaps(&parts[1]));
    ///
    /// // d joins: it takes a quarter or so, only from the others' parts, none moves between them.
    /// let four = ["a", "b", "c", "d"];
    /// let d = Ranges::assigned(&four, "d");
    /// assert!((0.15..0.35).contains(&d.share()));
    /// for (member, before) in three.iter().zip(&parts) {
    ///     let after = Ranges::assigned(&four, member);
    ///     assert_eq!(before.difference(&after), before.intersection(&d));
    /// }
    /// ```
    pub fn assigned(members: &[impl AsRef<str>], member: &str) -> Ranges {
        let score = |name: &str, top: u8| {
            // FNV-1a of the name and the bucket, spread over all 64 bits (FNV's last bytes
            // move the top bits little).
            let mut x = hash(name) ^ u64::from(top).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        let buckets = (0..=u8::MAX).filter(|&top| {
            let winner = members
                .iter()
                .map(AsRef::as_ref)
                .max_by_key(|name| (score(name, top), *name));
            winner == Some(member)
        });
        Ranges::new(buckets.map(Range::bucket))
    }

    /// The ranges, sorted, none adjacent to or overlapping another.
    pub fn ranges(&self) -> &[Range] {
        &self.0
    }

    /// Whether the set holds no hash.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the set holds every hash.
    pub fn is_full(&self) -> bool {
        self.0 == [Range::FULL]
    }

    /// Whether `hash` is in the set.
    pub fn contains(&self, hash: u64) -> bool {
        // Sorted and disjoint: the only candidate is the last range starting at or before `hash`.
        let after = self.0.partition_point(|range| range.start <= hash);
        after > 0 && self.0[after - 1].contains(hash)
    }

    /// Whether the two sets share a hash.
    pub fn overlaps(&self, other: &Ranges) -> bool {
        !self.intersection(other).is_empty()
    }

    /// The hashes in either set.
    pub fn union(&self, other: &Ranges) -> Ranges {
        Ranges::new(self.0.iter().chain(&other.0).copied())
    }

    /// The hashes in both sets.
    pub fn intersection(&self, other: &Ranges) -> Ranges {
        let mut common = Vec::new();
        for a in &self.0 {
            for b in &other.0 {
                let start = a.start.max(b.start);
                if let Some(range) = Range::new(start, a.end.min(b.end)) {
                    common.push(range);
                }
            }
        }
        Ranges::new(common)
    }

    /// The hashes of `self` that are not in `other`.
    pub fn difference(&self, other: &Ranges) -> Ranges {
        let mut left = Vec::new();
        for range in &self.0 {
            let mut start = u128::from(range.start);
            for cut in &other.0 {
                if cut.end <= start || u128::from(cut.start) >= range.end {
                    continue;
                }
                left.extend(Range::new(to_u64(start), u128::from(cut.start)));
                start = start.max(cut.end);
            }
            if start < SPACE {
                left.extend(Range::new(to_u64(start), range.end));
            }
        }
        Ranges::new(left)
    }

    /// The share of the hash space the set covers, from 0 to 1: the share of objects it holds on
    /// average, since uids hash evenly.
    pub fn share(&self) -> f64 {
        let size: u128 = self.0.iter().map(|r| r.end - u128::from(r.start)).sum();
        size as f64 / SPACE as f64
    }

    /// The `shardSelector` of a list or watch that returns the objects of this set: its ranges'
    /// `shardRange(…)` terms joined by ` || `. `None` for the empty set, which no selector
    /// expresses.
    pub fn selector(&self) -> Option<String> {
        let terms: Vec<String> = self.0.iter().map(Range::selector).collect();
        (!terms.is_empty()).then(|| terms.join(" || "))
    }
}

fn to_u64(value: u128) -> u64 {
    u64::try_from(value).expect("a range start lies below 2^64")
}

impl From<Range> for Ranges {
    fn from(range: Range) -> Self {
        Ranges(vec![range])
    }
}

/// The ranges as `0x<start>-0x<end>` separated by commas; empty for no hash.
impl fmt::Display for Ranges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

/// A text that [`Ranges`]'s `Display` did not write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid shard ranges {0:?}: expected `0x<start>-0x<end>` terms separated by commas")]
pub struct InvalidRanges(String);

impl FromStr for Ranges {
    type Err = InvalidRanges;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidRanges(text.to_string());
        let text = text.trim();
        if text.is_empty() {
            return Ok(Ranges::none());
        }
        let mut ranges = Vec::new();
        for term in text.split(',') {
            let (start, end) = term.trim().split_once('-').ok_or_else(invalid)?;
            let start = parse_hex(start).and_then(|s| u64::try_from(s).ok());
            let end = parse_hex(end);
            let range = start
                .zip(end)
                .and_then(|(start, end)| Range::new(start, end));
            ranges.push(range.ok_or_else(invalid)?);
        }
        Ok(Ranges::new(ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigned_parts_are_balanced_and_move_little() {
        let names: Vec<String> = (0..9)
            .map(|i| format!("memcached-operator-7d9f-{i:05x}"))
            .collect();
        for n in 2..=8 {
            let group = &names[..n];
            let parts: Vec<Ranges> = group.iter().map(|m| Ranges::assigned(group, m)).collect();
            let even = 1.0 / n as f64;
            for part in &parts {
                assert!(
                    (part.share() - even).abs() < 0.1,
                    "{n} members: {}",
                    part.share()
                );
            }
            let all = parts.iter().fold(Ranges::none(), |all, p| all.union(p));
            assert!(all.is_full());
            // One more member: it takes its part from the others, nothing else moves.
            let larger = &names[..=n];
            let newcomer = Ranges::assigned(larger, &names[n]);
            assert!((newcomer.share() - 1.0 / (n + 1) as f64).abs() < 0.1);
            for (member, before) in group.iter().zip(&parts) {
                let after = Ranges::assigned(larger, member);
                assert_eq!(before.difference(&after), before.intersection(&newcomer));
                assert!(after.difference(before).is_empty(), "{member} gained");
            }
        }
    }

    #[test]
    fn the_hash_is_gos_fnv_1a_64() {
        // Computed with Go's hash/fnv (New64a), which the API server uses.
        for (uid, expected) in [
            ("", 0xcbf29ce484222325),
            ("a", 0xaf63dc4c8601ec8c),
            ("abc", 0xe71fa2190541574b),
            ("test-uid-12345", 0xd4c53b72f9287c28),
            ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0x93754b7248a00eb9),
            ("9f1c2d4e-5b6a-4c3d-8e7f-0a1b2c3d4e5f", 0x938a713f0901b24d),
        ] {
            assert_eq!(hash(uid), expected, "{uid:?}");
        }
    }

    #[test]
    fn parts_cover_the_space_in_order_without_overlap() {
        for count in 1..=7 {
            let parts: Vec<Range> = (0..count).map(|i| Range::part(i, count)).collect();
            assert_eq!(parts[0].start(), 0);
            assert_eq!(parts[count - 1].end(), SPACE);
            for pair in parts.windows(2) {
                assert_eq!(u128::from(pair[1].start()), pair[0].end(), "{count} parts");
                assert!(!pair[0].overlaps(&pair[1]));
            }
            let sizes: Vec<u128> = parts
                .iter()
                .map(|p| p.end() - u128::from(p.start()))
                .collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(max - min <= 1, "{count} parts: {sizes:?}");
            assert!(Ranges::new(parts).is_full());
        }
        assert_eq!(Range::part(0, 1), Range::FULL);
    }

    #[test]
    fn bounds_of_ranges() {
        let half = Range::part(1, 2);
        assert!(!half.contains(0x7fff_ffff_ffff_ffff));
        assert!(half.contains(0x8000_0000_0000_0000));
        assert!(half.contains(u64::MAX));
        assert!(Range::new(5, 5).is_none());
        assert!(Range::new(0, SPACE + 1).is_none());
        assert!(
            Range::new(1, 2)
                .unwrap()
                .overlaps(&Range::new(0, 2).unwrap())
        );
        assert!(
            !Range::new(0, 1)
                .unwrap()
                .overlaps(&Range::new(1, 2).unwrap())
        );
    }

    #[test]
    fn selector_strings_are_the_api_servers() {
        assert_eq!(
            Range::part(0, 2).selector(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        let outer = Ranges::new([Range::part(0, 4), Range::part(3, 4)]);
        assert_eq!(
            outer.selector().unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
             shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(Ranges::none().selector(), None);
    }

    #[test]
    fn set_operations() {
        let r = |start: u64, end: u128| Range::new(start, end).unwrap();
        let a = Ranges::new([r(0, 10), r(20, 30)]);
        let b = Ranges::new([r(5, 25)]);
        assert_eq!(a.intersection(&b), Ranges::new([r(5, 10), r(20, 25)]));
        assert_eq!(a.difference(&b), Ranges::new([r(0, 5), r(25, 30)]));
        assert_eq!(b.difference(&a), Ranges::new([r(10, 20)]));
        assert_eq!(a.union(&b), Ranges::new([r(0, 30)]));
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&Ranges::new([r(10, 20), r(30, SPACE)])));
        assert_eq!(Ranges::full().difference(&Ranges::full()), Ranges::none());
        let top = Ranges::from(r(u64::MAX, SPACE));
        assert_eq!(
            Ranges::full().difference(&top),
            Ranges::from(r(0, SPACE - 1))
        );
        assert!(a.contains(0) && a.contains(29) && !a.contains(10) && !a.contains(30));
        assert!(!Ranges::none().contains(0));
        assert!((Ranges::from(Range::part(1, 4)).share() - 0.25).abs() < 1e-12);
    }

    #[test]
    fn ranges_read_back_what_they_write() {
        for ranges in [
            Ranges::none(),
            Ranges::full(),
            Ranges::new([Range::part(0, 5), Range::part(2, 5), Range::part(4, 5)]),
        ] {
            assert_eq!(ranges.to_string().parse::<Ranges>(), Ok(ranges));
        }
        for invalid in [
            "0x1",
            "0x2-0x1",
            "1-2",
            "0x0-0x20000000000000000",
            "0x0-0x1,",
        ] {
            assert!(invalid.parse::<Ranges>().is_err(), "{invalid:?}");
        }
    }
}
