//! What a receiver measures per (sender, stream): frames received, lost, duplicated and out of
//! order (from the frames' sequence numbers), and each frame's offset `arrival − capture`.
//!
//! The offset mixes the two processes' clocks (each counts from its own start), so alone it
//! says little; but the audio and video of one sender carry the same sender clock, so the
//! difference of their offsets is the skew between the two streams as presented: what the
//! `sync` layer keeps within its `max_skew`.
//!
//! # Memory
//! One bit per sequence number up to the highest received (at most [`MAX_SEQ`]: a number past
//! it is refused), and one 16-byte sample per frame for the first [`MAX_SAMPLES`] frames of a
//! stream (later frames are counted but not sampled): about 1 MiB per stream at most.

use serde::Serialize;

/// Highest sequence number accepted: 2^22 frames, 23 hours of audio.
pub const MAX_SEQ: u32 = 1 << 22;
/// Frames sampled per stream: 22 minutes of audio, 36 of video.
pub const MAX_SAMPLES: usize = 1 << 16;

/// A frame's capture time and offset, µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    capture: i64,
    offset: i64,
}

/// A sequence number past [`MAX_SEQ`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqTooLarge(pub u32);

/// One stream from one sender, as received.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Bit `n` set: frame `n` arrived.
    seen: Vec<u64>,
    received: u64,
    duplicates: u64,
    out_of_order: u64,
    highest: Option<u32>,
    samples: Vec<Sample>,
}

/// The figures of one stream, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    /// Distinct frames received.
    pub received: u64,
    /// Frames sent but not received: of the sender's announced count if its bye arrived, else
    /// of the frames up to the highest number received.
    pub lost: u64,
    /// Copies of frames already received.
    pub duplicates: u64,
    /// Frames that arrived after a higher-numbered one.
    pub out_of_order: u64,
    /// The median of `arrival − capture` over the sampled frames, ms (the two processes'
    /// clocks differ: meaningful in comparison with the sender's other streams).
    pub median_offset_ms: Option<f64>,
}

/// Audio/video skew of one sender.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Skew {
    /// |median video offset − median audio offset|, ms.
    pub skew_ms: f64,
    /// The 95th percentile, over video frames, of |the frame's offset − the offset of the audio
    /// frame captured nearest to it|, ms.
    pub skew_p95_ms: f64,
}

impl StreamStats {
    /// Frame `seq`, captured at `capture_us` by the sender's clock, arrived at `arrival_us` by
    /// this node's.
    ///
    /// # Errors
    /// [`SeqTooLarge`]: not counted.
    pub fn record(
        &mut self,
        seq: u32,
        capture_us: u64,
        arrival_us: u64,
    ) -> Result<(), SeqTooLarge> {
        if seq >= MAX_SEQ {
            return Err(SeqTooLarge(seq));
        }
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & bit != 0 {
            self.duplicates += 1;
            return Ok(());
        }
        self.seen[word] |= bit;
        self.received += 1;
        match self.highest {
            Some(h) if seq < h => self.out_of_order += 1,
            _ => self.highest = Some(seq),
        }
        if self.samples.len() < MAX_SAMPLES {
            let capture = i64::try_from(capture_us).unwrap_or(i64::MAX);
            let arrival = i64::try_from(arrival_us).unwrap_or(i64::MAX);
            self.samples.push(Sample {
                capture,
                offset: arrival.saturating_sub(capture),
            });
        }
        Ok(())
    }

    /// The figures; `announced`: how many frames the sender says it sent.
    pub fn report(&self, announced: Option<u32>) -> StreamReport {
        let expected =
            announced.map_or_else(|| self.highest.map_or(0, |h| u64::from(h) + 1), u64::from);
        StreamReport {
            received: self.received,
            lost: expected.saturating_sub(self.received),
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
            median_offset_ms: quantile(self.samples.iter().map(|s| s.offset).collect(), 0.5)
                .map(ms),
        }
    }
}

/// The skew between a sender's `audio` and `video`, if both have frames.
pub fn skew(audio: &StreamStats, video: &StreamStats) -> Option<Skew> {
    let median = |s: &StreamStats| quantile(s.samples.iter().map(|s| s.offset).collect(), 0.5);
    let (a, v) = (median(audio)?, median(video)?);
    let mut by_capture = audio.samples.clone();
    by_capture.sort_by_key(|s| s.capture);
    let diffs = video
        .samples
        .iter()
        .filter_map(|v| {
            let i = by_capture.partition_point(|a| a.capture < v.capture);
            let nearest = [i.checked_sub(1), Some(i)]
                .into_iter()
                .flatten()
                .filter_map(|j| by_capture.get(j))
                .min_by_key(|a| a.capture.abs_diff(v.capture))?;
            Some(v.offset.saturating_sub(nearest.offset).saturating_abs())
        })
        .collect();
    Some(Skew {
        skew_ms: ms(v.saturating_sub(a).saturating_abs()),
        skew_p95_ms: quantile(diffs, 0.95).map_or(0.0, ms),
    })
}

/// The `q`-quantile of `values` (nearest rank), if any.
fn quantile(mut values: Vec<i64>, q: f64) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (q * values.len() as f64).ceil() as usize;
    values.get(rank.clamp(1, values.len()) - 1).copied()
}

/// µs as ms.
fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_duplicates_and_reordering_come_from_sequence_numbers() {
        let mut s = StreamStats::default();
        for seq in [0, 1, 3, 2, 3, 5, 70, 69] {
            s.record(seq, 0, 0).unwrap();
        }
        let r = s.report(None);
        assert_eq!(r.received, 7);
        assert_eq!(r.duplicates, 1); // the second 3
        assert_eq!(r.out_of_order, 2); // 2 after 3, 69 after 70
        assert_eq!(r.lost, 71 - 7); // 0..=70, judged by the highest number
        assert_eq!(s.report(Some(80)).lost, 80 - 7); // the sender's count wins
        assert_eq!(s.record(MAX_SEQ, 0, 0), Err(SeqTooLarge(MAX_SEQ)));
        assert_eq!(s.report(None).received, 7);
    }

    #[test]
    fn skew_is_the_difference_of_median_offsets() {
        let (mut audio, mut video) = (StreamStats::default(), StreamStats::default());
        // Audio every 20 ms arriving 5 ms after capture; video every 33 ms arriving 35 ms
        // after, except one frame 100 ms late. The receiver's clock is 1 s ahead.
        for seq in 0..100u32 {
            let capture = u64::from(seq) * 20_000;
            audio
                .record(seq, capture, 1_000_000 + capture + 5_000)
                .unwrap();
        }
        for seq in 0..60u32 {
            let capture = u64::from(seq) * 33_333;
            let late = if seq == 10 { 100_000 } else { 0 };
            video
                .record(seq, capture, 1_000_000 + capture + 35_000 + late)
                .unwrap();
        }
        let s = skew(&audio, &video).unwrap();
        assert_eq!(s.skew_ms, 30.0);
        assert_eq!(s.skew_p95_ms, 30.0); // one late frame in 60 stays above the 95th percentile
        assert_eq!(audio.report(None).median_offset_ms, Some(1005.0));
        assert!(skew(&audio, &StreamStats::default()).is_none());
    }
}
