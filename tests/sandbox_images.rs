//! Layers are tagged by a hash of their inputs: an unchanged layer is not rebuilt, a changed
//! context file or parent gives a new tag.

mod common;

use std::time::Instant;

use common::sandbox::{connect, default_image};
use repairbench::sandbox::images::{build_layer_from_dir, list_images};
use repairbench::sandbox::{EnvSpec, Job, Verdict};

#[tokio::test(flavor = "multi_thread")]
async fn unchanged_layers_are_reused_and_changed_ones_rebuilt() {
    let parent = default_image();
    let sandbox = connect().await;
    let docker = sandbox.docker();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "ARG BASE\nFROM ${BASE}\nCOPY greeting.txt /opt/greeting.txt\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("greeting.txt"), "first\n").unwrap();
    let name = format!("test-layer-{}", std::process::id());

    let first = build_layer_from_dir(docker, &name, dir.path(), &parent).await.unwrap();
    let first_id = docker.inspect_image(&first).await.unwrap().id;
    let started = Instant::now();
    let again = build_layer_from_dir(docker, &name, dir.path(), &parent).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(docker.inspect_image(&again).await.unwrap().id, first_id, "an unchanged layer was rebuilt");
    println!("cached layer lookup took {:?}", started.elapsed());

    std::fs::write(dir.path().join("greeting.txt"), "second\n").unwrap();
    let changed = build_layer_from_dir(docker, &name, dir.path(), &parent).await.unwrap();
    assert_ne!(changed, first, "a changed context file must give a new tag");

    // The new layer is what runs, with our labels on it.
    let out = sandbox
        .run_job(
            &EnvSpec::new(changed.clone()),
            &Job {
                cmd: vec!["cat".into(), "/opt/greeting.txt".into()],
                timeout: std::time::Duration::from_secs(30),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!((out.result.verdict, out.result.stdout.as_str()), (Verdict::Exit(0), "second\n"));
    let ours: Vec<_> = list_images(docker).await.unwrap().into_iter().filter(|r| r.layer == name).collect();
    assert_eq!(ours.len(), 2, "{ours:?}");

    for tag in [first, changed] {
        docker.remove_image(&tag, None::<bollard::query_parameters::RemoveImageOptions>, None).await.unwrap();
    }
}
