//! Image layers described as values: a Dockerfile, its build context and its parent. A caller
//! says what an environment needs; the sandbox builds what is missing and reuses the rest
//! (tags hash every input, see [`super::images::build_layer`]).

use bollard::Docker;

use super::images::{build_layer_sorted, ensure_default_image, ImageError, LayerFiles};

/// Host settings passed to every layer build as build arguments, so a layer that installs
/// packages uses the same package index, proxy or mirror as the host. A Dockerfile declares
/// the ones it uses with `ARG`.
pub const PASSED_BUILD_ARGS: &[&str] = &[
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "GOPROXY",
    "GONOSUMDB",
    "GOFLAGS",
    "NPM_CONFIG_REGISTRY",
    "CARGO_REGISTRIES_CRATES_IO_PROTOCOL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// One layer to build.
#[derive(Debug, Clone)]
pub struct LayerSpec {
    /// The repository part of the tag: `repairbench/<name>:<inputs hash>`.
    pub name: String,
    /// The Dockerfile (`FROM ${BASE}`) and every other context file, sorted by path.
    pub files: LayerFiles,
    pub parent: ParentImage,
}

#[derive(Debug, Clone)]
pub enum ParentImage {
    /// The default sandbox image (built when missing).
    Default,
    /// An image the engine has.
    Image(String),
    /// Another layer of ours, built first.
    Layer(Box<LayerSpec>),
}

impl LayerSpec {
    pub fn new(name: impl Into<String>, mut files: LayerFiles, parent: ParentImage) -> Self {
        files.sort();
        Self { name: name.into(), files, parent }
    }
}

/// Builds `spec` and every parent it needs, unless built; returns the tag.
pub async fn ensure_layer(docker: &Docker, spec: &LayerSpec) -> Result<String, ImageError> {
    let parent = match &spec.parent {
        ParentImage::Default => ensure_default_image(docker).await?,
        ParentImage::Image(image) => image.clone(),
        ParentImage::Layer(parent) => Box::pin(ensure_layer(docker, parent)).await?,
    };
    build_layer_sorted(docker, &spec.name, &spec.files, &parent).await
}
