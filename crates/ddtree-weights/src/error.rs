//! The one error type of this crate.

use std::path::{Path, PathBuf};

use crate::safetensors::Dtype;

/// Everything that can go wrong while loading weights, configs or tokenizer files.
///
/// Every variant names the file (or directory) it is about and, where relevant, the tensor or
/// config key, so that the `Display` text alone tells a user what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file or directory could not be read (not found, permission denied, …).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A directory holds no safetensors checkpoint.
    #[error(
        "no safetensors checkpoint in {}: expected model.safetensors, \
         model.safetensors.index.json with its shards, or a *.safetensors file",
        dir.display()
    )]
    NoCheckpoint {
        /// The directory that was searched.
        dir: PathBuf,
    },

    /// The file is shorter than the 8-byte header-length prefix.
    #[error(
        "{} is not a safetensors file: it is {len} bytes long, shorter than the 8-byte header length",
        path.display()
    )]
    FileTooShort {
        /// The file.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
    },

    /// The header length prefix claims more bytes than the file has.
    #[error(
        "{}: the header length prefix says {header_len} bytes but only {available} bytes follow it \
         (truncated file, or not a safetensors file)",
        path.display()
    )]
    HeaderTooLong {
        /// The file.
        path: PathBuf,
        /// The header length read from the first 8 bytes.
        header_len: u64,
        /// The bytes that follow the prefix.
        available: u64,
    },

    /// The JSON header is not UTF-8, not JSON, or not of the safetensors shape.
    #[error("{}: invalid safetensors header: {reason}", path.display())]
    InvalidHeader {
        /// The file.
        path: PathBuf,
        /// What was wrong, naming the tensor where there is one.
        reason: String,
    },

    /// A tensor's `data_offsets` point past the end of the data section.
    #[error(
        "{}: tensor `{tensor}` has data_offsets [{begin}, {end}] but the data section holds only \
         {data_len} bytes (truncated file?)",
        path.display()
    )]
    DataOutOfRange {
        /// The file.
        path: PathBuf,
        /// The tensor (raw name as stored in the file).
        tensor: String,
        /// Start offset inside the data section.
        begin: u64,
        /// End offset inside the data section.
        end: u64,
        /// Length of the data section.
        data_len: u64,
    },

    /// Two tensors' byte ranges overlap.
    #[error("{}: the bytes of tensor `{tensor}` overlap those of tensor `{other}`", path.display())]
    OverlappingData {
        /// The file.
        path: PathBuf,
        /// One tensor.
        tensor: String,
        /// The tensor it overlaps.
        other: String,
    },

    /// A tensor's byte range does not match `dtype × shape` (or the product overflows).
    #[error(
        "{}: tensor `{tensor}` is {dtype} of shape {shape:?}, which needs {expected} bytes, but its \
         data_offsets span {found} bytes",
        path.display()
    )]
    SizeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes needed by dtype × shape ("overflow" when the product does not fit).
        expected: String,
        /// Bytes given by the offsets.
        found: u64,
    },

    /// A dtype this crate cannot read for the request (or not a safetensors dtype at all).
    #[error("{}: tensor `{tensor}` has dtype {dtype}: {allowed}", path.display())]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dtype as written in the header.
        dtype: String,
        /// What is supported here.
        allowed: String,
    },

    /// No tensor of that (normalised) name.
    #[error("tensor `{tensor}` not found in {}{hint}", path.display())]
    MissingTensor {
        /// The checkpoint directory or file.
        path: PathBuf,
        /// The requested (normalised) name.
        tensor: String,
        /// A hint such as the raw name that was normalised, or similar names.
        hint: String,
    },

    /// The tensor exists but has another shape.
    #[error("{}: tensor `{tensor}` has shape {found:?}, expected {expected:?}", path.display())]
    ShapeMismatch {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The shape the caller asked for.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },

    /// The tensor exists but is stored in another dtype than the one requested.
    #[error(
        "{}: tensor `{tensor}` is stored as {found}, but {requested} was requested",
        path.display()
    )]
    WrongDtype {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dtype the caller asked for.
        requested: Dtype,
        /// The dtype in the file.
        found: Dtype,
    },

    /// The same tensor is stored in two shard files.
    #[error(
        "tensor `{tensor}` is stored twice: in {} and in {}",
        first.display(),
        second.display()
    )]
    DuplicateTensor {
        /// The raw tensor name.
        tensor: String,
        /// The first file.
        first: PathBuf,
        /// The second file.
        second: PathBuf,
    },

    /// Two different raw names normalise to the same name.
    #[error(
        "{}: tensors `{first}` and `{second}` both normalise to `{name}`",
        path.display()
    )]
    NameCollision {
        /// The file holding the second one.
        path: PathBuf,
        /// The normalised name.
        name: String,
        /// The first raw name.
        first: String,
        /// The second raw name.
        second: String,
    },

    /// `*.index.json` names a shard file that does not exist.
    #[error(
        "{}: the index puts tensor `{tensor}` in shard {}, which does not exist",
        index.display(),
        shard.display()
    )]
    MissingShard {
        /// The index file.
        index: PathBuf,
        /// The missing shard.
        shard: PathBuf,
        /// One tensor the index puts there.
        tensor: String,
    },

    /// `*.index.json` is malformed or disagrees with its shards.
    #[error("{}: invalid safetensors index: {reason}", path.display())]
    InvalidIndex {
        /// The index file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// burn has no rank-0 tensors.
    #[error(
        "{}: tensor `{tensor}` requested as a rank-0 burn tensor, which burn does not support; \
         read it with `to_f32` or ask for shape [1]",
        path.display()
    )]
    ZeroRank {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor.
        tensor: String,
    },

    /// A JSON file (config, index, tokenizer config) is not valid JSON.
    #[error("{}: not valid JSON: {reason}", path.display())]
    ConfigParse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },

    /// A config lacks a required key.
    #[error("{}: missing required key `{key}`", path.display())]
    ConfigMissingKey {
        /// The config file.
        path: PathBuf,
        /// The key, with its parent objects (e.g. `text_config.hidden_size`).
        key: String,
    },

    /// A config key holds a value of the wrong JSON type.
    #[error("{}: key `{key}` should be {expected}, found {found}", path.display())]
    ConfigWrongType {
        /// The config file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The expected type.
        expected: &'static str,
        /// What was found.
        found: String,
    },

    /// A config value has the right type but is not allowed (e.g. heads not dividing).
    #[error("{}: invalid value for `{key}`: {reason}", path.display())]
    ConfigInvalid {
        /// The config file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Why, and what is allowed.
        reason: String,
    },

    /// The RoPE variant or rotary size cannot be computed by this implementation.
    #[error("unsupported RoPE configuration: {0}")]
    UnsupportedRope(String),

    /// `tokenizer.json` could not be parsed by the `tokenizers` crate.
    #[error("{}: cannot load tokenizer: {reason}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers crate's message.
        reason: String,
    },

    /// No chat template was found next to the tokenizer.
    #[error(
        "no chat template in {}: looked for chat_template.jinja, chat_template.json and \
         `chat_template` in tokenizer_config.json",
        dir.display()
    )]
    NoChatTemplate {
        /// The directory searched.
        dir: PathBuf,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
