//! The decoded video as an MP4 file: H.264 from Cisco's OpenH264 (the `openh264` crate builds it
//! from source, no system library) in an MP4 container written by `muxide`, at Wan's 16 frames
//! a second. Frames are 8-bit RGB, converted to BT.601 limited-range 4:2:0 YUV (signalled in the
//! stream's VUI), so width and height must be even: the decoder's outputs (8x the latent) are.

use std::path::Path;

use muxide::api::{MuxerBuilder, VideoCodec};
use openh264::OpenH264API;
use openh264::encoder::{
    Encoder, EncoderConfig, FrameRate, FrameType, QpRange, RateControlMode, VuiConfig,
};
use openh264::formats::{RgbSliceU8, YUVBuffer};

/// Wan's frame rate.
pub const WAN_FPS: f64 = 16.0;

/// How [`write_mp4`] encodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mp4Options {
    /// Frames per second (> 0).
    pub fps: f64,
    /// H.264's quantisation parameter for every frame, 0 (finest) to 51: a fixed quality, no
    /// rate control (which skips frames to hold a bit rate).
    pub qp: u8,
}

impl Default for Mp4Options {
    fn default() -> Self {
        Self {
            fps: WAN_FPS,
            qp: 20,
        }
    }
}

/// Why [`write_mp4`] could not write the video.
#[derive(Debug)]
pub enum VideoError {
    /// No frames were given.
    NoFrames,
    /// H.264 4:2:0 needs even sizes.
    OddSize { width: usize, height: usize },
    /// A frame's byte count is not `width * height * 3`.
    FrameLength {
        index: usize,
        expected: usize,
        got: usize,
    },
    /// `fps` not positive and finite, or `qp` past 51.
    BadOptions(String),
    /// The file could not be created or written.
    Io(std::io::Error),
    /// The H.264 encoder refused a frame or its configuration.
    Encode(String),
    /// The MP4 muxer refused a frame or could not finish the file.
    Mux(String),
}

impl std::fmt::Display for VideoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoFrames => write!(f, "`frames` is empty: an MP4 needs at least one frame"),
            Self::OddSize { width, height } => write!(
                f,
                "H.264 4:2:0 needs an even `width` and `height`, got {width}x{height}"
            ),
            Self::FrameLength {
                index,
                expected,
                got,
            } => write!(
                f,
                "frame {index} has {got} bytes, expected width x height x 3 = {expected} (RGB)"
            ),
            Self::BadOptions(why) => write!(f, "MP4 options: {why}"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Encode(e) => write!(f, "H.264 encoder: {e}"),
            Self::Mux(e) => write!(f, "MP4 muxer: {e}"),
        }
    }
}

impl std::error::Error for VideoError {}

/// Writes `frames` (each `width * height * 3` bytes of RGB, rows top to bottom) to `path` as an
/// H.264 MP4. Every frame is a sample; the first is a key frame.
pub fn write_mp4(
    path: &Path,
    frames: &[Vec<u8>],
    width: usize,
    height: usize,
    options: Mp4Options,
) -> Result<(), VideoError> {
    if frames.is_empty() {
        return Err(VideoError::NoFrames);
    }
    if width == 0 || height == 0 || !width.is_multiple_of(2) || !height.is_multiple_of(2) {
        return Err(VideoError::OddSize { width, height });
    }
    let expected = width * height * 3;
    if let Some((index, frame)) = frames.iter().enumerate().find(|(_, f)| f.len() != expected) {
        return Err(VideoError::FrameLength {
            index,
            expected,
            got: frame.len(),
        });
    }
    let Mp4Options { fps, qp } = options;
    if !(fps.is_finite() && fps > 0.0) {
        return Err(VideoError::BadOptions(format!(
            "`fps` must be positive and finite, got {fps}"
        )));
    }
    if qp > 51 {
        return Err(VideoError::BadOptions(format!(
            "`qp` must be 0 to 51, got {qp}"
        )));
    }
    let config = EncoderConfig::new()
        .rate_control_mode(RateControlMode::Off)
        .qp(QpRange::new(qp, qp))
        .max_frame_rate(FrameRate::from_hz(fps as f32))
        .skip_frames(false)
        .vui(VuiConfig::bt601());
    let mut encoder = Encoder::with_api_config(OpenH264API::from_source(), config)
        .map_err(|e| VideoError::Encode(e.to_string()))?;
    let file = std::fs::File::create(path).map_err(VideoError::Io)?;
    let mut muxer = MuxerBuilder::new(std::io::BufWriter::new(file))
        .video(VideoCodec::H264, width as u32, height as u32, fps)
        .build()
        .map_err(|e| VideoError::Mux(e.to_string()))?;
    for (index, rgb) in frames.iter().enumerate() {
        let yuv = YUVBuffer::from_rgb8_source(RgbSliceU8::new(rgb, (width, height)));
        let bits = encoder
            .encode(&yuv)
            .map_err(|e| VideoError::Encode(format!("frame {index}: {e}")))?;
        let key = matches!(bits.frame_type(), FrameType::IDR | FrameType::I);
        muxer
            .write_video(index as f64 / fps, &bits.to_vec(), key)
            .map_err(|e| VideoError::Mux(format!("frame {index}: {e}")))?;
    }
    muxer.finish().map_err(|e| VideoError::Mux(e.to_string()))
}
