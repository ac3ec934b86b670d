//! `images`: flags resolved, then one call into [`repairbench::run::images`].

use clap::Subcommand;
use repairbench::run::images;

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// List repairbench's images (tag, layer, size, age).
    List {
        /// Print one JSON object per image.
        #[arg(long)]
        json: bool,
    },
    /// Build whatever is missing of the default image (base, then Python layer), a layer
    /// directory on top of a parent image, or (with --dataset) the environment of every
    /// instance of a dataset. Unchanged layers are not rebuilt.
    Build {
        /// Build the environments of this dataset's instances (exit 6 if any fails).
        #[arg(long, conflicts_with = "dir")]
        dataset: Option<std::path::PathBuf>,
        /// Repositories for --dataset, as in `swe grade --repos`.
        #[arg(long, requires = "dataset")]
        repos: Option<std::path::PathBuf>,
        /// Environment specs for --dataset, as in `swe grade --specs`.
        #[arg(long, requires = "dataset")]
        specs: Option<std::path::PathBuf>,
        /// Environments built at once for --dataset.
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// A layer directory with a Dockerfile (`FROM ${BASE}`) to build on top of --parent.
        #[arg(long, requires = "name")]
        dir: Option<std::path::PathBuf>,
        /// Name of the layer built from --dir (the image is tagged repairbench/NAME:HASH).
        #[arg(long)]
        name: Option<String>,
        /// Parent image for --dir (default: the default Python image).
        #[arg(long)]
        parent: Option<String>,
    },
    /// Remove repairbench images that are no longer current (or all of them with --all).
    Prune {
        #[arg(long)]
        all: bool,
    },
}

pub fn run(cmd: ImagesCommand) -> anyhow::Result<u8> {
    match cmd {
        ImagesCommand::List { json } => list(json),
        ImagesCommand::Build { dataset: Some(dataset), repos, specs, workers, .. } => {
            let plan = images::EnvironmentBuildPlan {
                dataset,
                repos,
                specs,
                url_template: repairbench::env::get(repairbench::env::REPO_URL_TEMPLATE),
                cache_dir: repairbench::env::cache_dir(),
                workers,
            };
            let rows = images::build_environments(plan)?;
            let failed = rows.iter().filter(|r| r.error.is_some()).count();
            for row in &rows {
                match (&row.image, &row.error) {
                    (Some(image), _) => println!("{:<40} {image}", row.instance_id),
                    (None, error) => {
                        println!("{:<40} FAILED {}", row.instance_id, error.as_deref().unwrap_or(""))
                    }
                }
            }
            println!("{} environments ready, {failed} failed", rows.len() - failed);
            Ok(if failed > 0 { super::EXIT_IMAGE_BUILD_FAILED } else { super::EXIT_OK })
        }
        ImagesCommand::Build { dir, name, parent, .. } => {
            let what = match (dir, name) {
                (Some(dir), Some(name)) => images::ImageBuild::Layer { dir, name, parent },
                _ => images::ImageBuild::Default,
            };
            println!("{}", images::build_image(what)?);
            Ok(super::EXIT_OK)
        }
        ImagesCommand::Prune { all } => {
            let report = images::prune_images(all)?;
            for name in &report.removed {
                println!("removed {name}");
            }
            for (name, why) in &report.kept {
                println!("kept {name}: {why}");
            }
            if report.removed.is_empty() && report.kept.is_empty() {
                println!("nothing to prune");
            }
            Ok(super::EXIT_OK)
        }
    }
}

fn list(json: bool) -> anyhow::Result<u8> {
    let rows = images::list_images()?;
    if json {
        for row in &rows {
            println!("{}", serde_json::to_string(row)?);
        }
        return Ok(super::EXIT_OK);
    }
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    println!("{:<40} {:<10} {:>10} {:>8}  ID", "TAG", "LAYER", "SIZE", "AGE");
    for row in rows {
        let tag = row.tags.first().cloned().unwrap_or_else(|| "<untagged>".into());
        println!(
            "{:<40} {:<10} {:>7.0} MB {:>7}  {}",
            tag,
            row.layer,
            row.size_bytes as f64 / 1e6,
            human_age(now - row.created),
            row.id.trim_start_matches("sha256:").chars().take(12).collect::<String>()
        );
    }
    Ok(super::EXIT_OK)
}

fn human_age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
