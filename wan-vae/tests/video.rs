//! `write_mp4` against a read-back of its own: the MP4's boxes parsed here (the sample table and
//! the avcC parameter sets), every sample's NAL units decoded by OpenH264's decoder and the
//! frames compared with the input; bad input refused with a message naming what is wrong.

use openh264::OpenH264API;
use openh264::decoder::{Decoder, DecoderConfig};
use openh264::formats::YUVSource;
use wan_vae::{Mp4Options, write_mp4};

/// The payload of the first box named `name` among the boxes that fill `data`.
fn child<'a>(data: &'a [u8], name: &str) -> &'a [u8] {
    let mut at = 0;
    while at + 8 <= data.len() {
        let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        let kind = std::str::from_utf8(&data[at + 4..at + 8]).unwrap_or("?");
        assert!(
            size >= 8 && at + size <= data.len(),
            "box {kind} of {size} bytes at {at}"
        );
        if kind == name {
            return &data[at + 8..at + size];
        }
        at += size;
    }
    panic!("no {name} box")
}

fn path<'a>(data: &'a [u8], names: &[&str]) -> &'a [u8] {
    names.iter().fold(data, |d, n| child(d, n))
}

fn be32(b: &[u8], at: usize) -> usize {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn be16(b: &[u8], at: usize) -> usize {
    u16::from_be_bytes(b[at..at + 2].try_into().unwrap()) as usize
}

/// The video track's samples (bytes of the file), its width and height, and the avcC's
/// NAL length size, SPS and PPS.
struct Track {
    samples: Vec<Vec<u8>>,
    width: usize,
    height: usize,
    length_size: usize,
    parameter_sets: Vec<Vec<u8>>,
}

fn read_track(file: &[u8]) -> Track {
    assert_eq!(&file[4..8], b"ftyp", "an MP4 starts with ftyp");
    let stbl = path(file, &["moov", "trak", "mdia", "minf", "stbl"]);
    // stsd: full box header, entry count, then the avc1 sample entry.
    let stsd = child(stbl, "stsd");
    assert_eq!(be32(stsd, 4), 1, "one sample description");
    let avc1 = child(&stsd[8..], "avc1");
    let (width, height) = (be16(avc1, 24), be16(avc1, 26));
    let avcc = child(&avc1[78..], "avcC");
    let length_size = (avcc[4] & 3) as usize + 1;
    let mut parameter_sets = Vec::new();
    let mut at = 5;
    for _ in 0..2 {
        // SPS count (low 5 bits), then the PPS count.
        let count = (avcc[at]
            & if parameter_sets.is_empty() {
                0x1f
            } else {
                0xff
            }) as usize;
        at += 1;
        for _ in 0..count {
            let len = be16(avcc, at);
            parameter_sets.push(avcc[at + 2..at + 2 + len].to_vec());
            at += 2 + len;
        }
    }
    let stsz = child(stbl, "stsz");
    let (uniform, count) = (be32(stsz, 4), be32(stsz, 8));
    let sizes: Vec<usize> = (0..count)
        .map(|i| {
            if uniform != 0 {
                uniform
            } else {
                be32(stsz, 12 + 4 * i)
            }
        })
        .collect();
    let stco = child(stbl, "stco");
    let chunks: Vec<usize> = (0..be32(stco, 4)).map(|i| be32(stco, 8 + 4 * i)).collect();
    // stsc: runs of (first chunk, samples per chunk); the last run lasts to the last chunk.
    let stsc = child(stbl, "stsc");
    let runs: Vec<(usize, usize)> = (0..be32(stsc, 4))
        .map(|i| (be32(stsc, 8 + 12 * i), be32(stsc, 12 + 12 * i)))
        .collect();
    let mut samples = Vec::new();
    let mut next = 0;
    for (c, &offset) in chunks.iter().enumerate() {
        let per_chunk = runs
            .iter()
            .rev()
            .find(|(first, _)| *first <= c + 1)
            .unwrap()
            .1;
        let mut at = offset;
        for _ in 0..per_chunk {
            samples.push(file[at..at + sizes[next]].to_vec());
            at += sizes[next];
            next += 1;
        }
    }
    assert_eq!(next, count, "the chunks hold every sample");
    Track {
        samples,
        width,
        height,
        length_size,
        parameter_sets,
    }
}

/// Smooth moving gradients, as decoded video looks: `count` RGB frames.
fn frames(width: usize, height: usize, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|f| {
            let mut rgb = Vec::with_capacity(width * height * 3);
            for y in 0..height {
                for x in 0..width {
                    let t = f as f64 * 0.3;
                    rgb.push((128.0 + 100.0 * ((x as f64 / 9.0) + t).sin()) as u8);
                    rgb.push((128.0 + 100.0 * ((y as f64 / 7.0) - t).cos()) as u8);
                    rgb.push((40 + (x + y + 3 * f) % 160) as u8);
                }
            }
            rgb
        })
        .collect()
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (255.0 * 255.0 / mse.max(1e-12)).log10()
}

#[test]
fn mp4_round_trip_through_an_independent_reader() {
    let (width, height, count) = (96, 64, 7);
    let input = frames(width, height, count);
    let file = std::env::temp_dir().join(format!("wan_video_{}.mp4", std::process::id()));
    write_mp4(&file, &input, width, height, Mp4Options::default()).expect("write_mp4");
    let bytes = std::fs::read(&file).expect("the MP4");
    std::fs::remove_file(&file).ok();
    let track = read_track(&bytes);
    assert_eq!((track.width, track.height), (width, height));
    assert_eq!(track.samples.len(), count, "one sample per frame");
    assert_eq!(track.parameter_sets.len(), 2, "one SPS and one PPS");
    // Annex B for the decoder: start codes before the parameter sets and each NAL unit.
    let mut decoder =
        Decoder::with_api_config(OpenH264API::from_source(), DecoderConfig::new()).unwrap();
    let mut stream = Vec::new();
    for set in &track.parameter_sets {
        stream.extend_from_slice(&[0, 0, 0, 1]);
        stream.extend_from_slice(set);
    }
    decoder.decode(&stream).expect("parameter sets");
    let mut worst = f64::INFINITY;
    for (i, sample) in track.samples.iter().enumerate() {
        let mut annex_b = Vec::new();
        let mut at = 0;
        while at < sample.len() {
            let len = (0..track.length_size).fold(0, |v, k| (v << 8) | sample[at + k] as usize);
            at += track.length_size;
            annex_b.extend_from_slice(&[0, 0, 0, 1]);
            annex_b.extend_from_slice(&sample[at..at + len]);
            at += len;
        }
        let yuv = decoder
            .decode(&annex_b)
            .unwrap_or_else(|e| panic!("sample {i}: {e}"))
            .unwrap_or_else(|| panic!("sample {i} gave no picture"));
        assert_eq!(yuv.dimensions(), (width, height));
        let mut rgb = vec![0u8; width * height * 3];
        yuv.write_rgb8(&mut rgb);
        let p = psnr(&rgb, &input[i]);
        worst = worst.min(p);
    }
    // BT.601 4:2:0 halves the colour resolution: the chroma of these gradients costs a few dB.
    assert!(worst >= 28.0, "worst frame PSNR {worst:.1} dB");
    eprintln!("MP4 round trip: {count} frames, worst PSNR {worst:.1} dB");
}

#[test]
fn bad_videos_are_refused_by_name() {
    let file = std::env::temp_dir().join(format!("wan_video_bad_{}.mp4", std::process::id()));
    let ok = frames(8, 6, 2);
    let refused = |frames: &[Vec<u8>], width, height, options, expected: &str| {
        let err = write_mp4(&file, frames, width, height, options)
            .expect_err(expected)
            .to_string();
        assert!(err.contains(expected), "{err}");
    };
    let default = Mp4Options::default();
    refused(&[], 8, 6, default, "`frames` is empty");
    refused(
        &frames(7, 6, 1),
        7,
        6,
        default,
        "even `width` and `height`, got 7x6",
    );
    refused(
        &ok,
        8,
        4,
        default,
        "frame 0 has 144 bytes, expected width x height x 3 = 96",
    );
    let zero_fps = Mp4Options {
        fps: 0.0,
        ..default
    };
    refused(
        &ok,
        8,
        6,
        zero_fps,
        "`fps` must be positive and finite, got 0",
    );
    let qp = Mp4Options { qp: 52, ..default };
    refused(&ok, 8, 6, qp, "`qp` must be 0 to 51, got 52");
    std::fs::remove_file(&file).ok();
}
