//! Value formats: container image references, volumes, environment variable names, http(s)
//! URLs. Each check returns `Err(message)` saying what is wrong and what would be accepted.

use std::sync::LazyLock;

use regex::Regex;

/// The grammar of `distribution/reference` (what Docker and containerd accept):
/// `[domain[:port]/]path-component[/path-component...][:tag][@digest]`.
static IMAGE_REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    let component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
    let domain_component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let domain =
        format!(r"(?:{domain_component}(?:\.{domain_component})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?");
    let tag = r"[\w][\w.-]{0,127}";
    let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    let re = format!(r"^(?:{domain}/)?{component}(?:/{component})*(?::{tag})?(?:@{digest})?$");
    // The pattern is a constant; a failure here is a programming error caught by the tests.
    Regex::new(&re).unwrap_or_else(|e| panic!("image reference pattern: {e}"))
});

const IMAGE_EXAMPLE: &str =
    "[registry[:port]/]name[:tag][@digest], such as quay.io/tinkerbell/actions/image2disk:v1.0.0";

/// Checks a container image reference.
pub fn image_reference(image: &str) -> Result<(), String> {
    if image.is_empty() {
        return Err(format!("an image is required: {IMAGE_EXAMPLE}"));
    }
    if image.chars().any(char::is_whitespace) {
        return Err(format!(
            "image {image:?} contains whitespace; expected {IMAGE_EXAMPLE}"
        ));
    }
    let name_len = image
        .split('@')
        .next()
        .map(|n| match n.rsplit_once(':') {
            Some((before, tag)) if !tag.contains('/') => before.len(),
            _ => n.len(),
        })
        .unwrap_or(0);
    if name_len > 255 {
        return Err(format!(
            "image {image:?} has a repository name longer than 255 characters"
        ));
    }
    if IMAGE_REFERENCE.is_match(image) {
        return Ok(());
    }
    // Say the most likely reason.
    let path = image
        .split('@')
        .next()
        .unwrap_or(image)
        .split('/')
        .skip(usize::from(image.contains('/')))
        .collect::<Vec<_>>()
        .join("/");
    let hint = if path.chars().any(|c| c.is_ascii_uppercase()) {
        "repository names must be lower-case; "
    } else if image.contains('@') {
        "a digest is algorithm:hex, such as sha256:<64 hex digits>; "
    } else {
        ""
    };
    Err(format!(
        "image {image:?} is not a valid image reference: {hint}expected {IMAGE_EXAMPLE}"
    ))
}

static VOLUME_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
        .unwrap_or_else(|e| panic!("volume name pattern: {e}"))
});

const VOLUME_EXAMPLE: &str = "src:dst or src:dst:ro|rw, where src is an absolute host path or a volume name and dst an absolute container path, such as /dev:/dev or /var/run/docker.sock:/var/run/docker.sock:ro";

/// Checks a volume: `src:dst[:ro|rw]`.
pub fn volume(volume: &str) -> Result<(), String> {
    let parts: Vec<&str> = volume.split(':').collect();
    let (src, dst, mode) = match parts.as_slice() {
        [src, dst] => (*src, *dst, None),
        [src, dst, mode] => (*src, *dst, Some(*mode)),
        _ => {
            return Err(format!(
                "volume {volume:?} has {} ':'-separated parts; expected {VOLUME_EXAMPLE}",
                parts.len()
            ));
        }
    };
    if src.is_empty() {
        return Err(format!(
            "volume {volume:?} has an empty source; expected {VOLUME_EXAMPLE}"
        ));
    }
    if !src.starts_with('/') && !VOLUME_NAME.is_match(src) {
        return Err(format!(
            "volume {volume:?}: source {src:?} is neither an absolute path nor a volume name ([a-zA-Z0-9][a-zA-Z0-9_.-]*); expected {VOLUME_EXAMPLE}"
        ));
    }
    if !dst.starts_with('/') {
        return Err(format!(
            "volume {volume:?}: destination {dst:?} is not an absolute container path; expected {VOLUME_EXAMPLE}"
        ));
    }
    match mode {
        None | Some("ro") | Some("rw") => Ok(()),
        Some(other) => Err(format!(
            "volume {volume:?}: mode {other:?} is not ro or rw; expected {VOLUME_EXAMPLE}"
        )),
    }
}

static ENV_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$").unwrap_or_else(|e| panic!("env pattern: {e}"))
});

/// Checks an environment variable name (Kubernetes' rule for container env names).
pub fn env_name(name: &str) -> Result<(), String> {
    if ENV_NAME.is_match(name) {
        Ok(())
    } else {
        Err(format!(
            "environment variable name {name:?} is not valid: it must consist of letters, digits, '_', '-' or '.', and must not start with a digit, such as DEST_DISK"
        ))
    }
}

/// Checks an absolute http(s) URL with a host.
pub fn http_url(text: &str, example: &str) -> Result<(), String> {
    let expected = format!("expected an absolute http:// or https:// URL, such as {example}");
    if text.chars().any(char::is_whitespace) {
        return Err(format!("{text:?} contains whitespace; {expected}"));
    }
    let url =
        url::Url::parse(text).map_err(|e| format!("{text:?} is not a URL ({e}); {expected}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{text:?} has scheme {:?}, not http or https; {expected}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host; {expected}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references() {
        for ok in [
            "alpine",
            "alpine:3.20",
            "library/alpine",
            "quay.io/tinkerbell/actions/image2disk:v1.0.0",
            "quay.io/tinkerbell/actions/image2disk:latest",
            "localhost:5000/busybox",
            "127.0.0.1:5000/a/b/c:tag_1.2-x",
            "[::1]:5000/busybox",
            "registry.example.com/ns/img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "img:tag@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a__b/c-d--e/f.g",
            "Registry.Example.COM/lower",
        ] {
            assert!(
                image_reference(ok).is_ok(),
                "{ok}: {:?}",
                image_reference(ok)
            );
        }
        for (bad, says) in [
            ("", "required"),
            ("Alpine", "lower-case"),
            ("quay.io/Tinkerbell/x", "lower-case"),
            ("alpine latest", "whitespace"),
            ("alpine:", "not a valid"),
            ("alpine::tag", "not a valid"),
            ("/alpine", "not a valid"),
            ("alpine/", "not a valid"),
            ("img@sha256:abc", "digest"),
            ("img:-tag", "not a valid"),
            ("-img", "not a valid"),
        ] {
            let e = image_reference(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("[registry[:port]/]name[:tag][@digest]"), "{e}");
        }
        let long = format!("a/{}", "b".repeat(260));
        assert!(image_reference(&long).unwrap_err().contains("255"));
    }

    #[test]
    fn volumes() {
        for ok in [
            "/dev:/dev",
            "/var/run/docker.sock:/var/run/docker.sock:ro",
            "/statedir:/statedir:rw",
            "data:/data",
            "my_vol.1:/x:ro",
        ] {
            assert!(volume(ok).is_ok(), "{ok}: {:?}", volume(ok));
        }
        for (bad, says) in [
            ("/dev", "1 ':'-separated parts"),
            ("/a:/b:ro:z", "4 ':'-separated parts"),
            (":/b", "empty source"),
            ("/a:b", "not an absolute container path"),
            ("/a:/b:z", "mode \"z\""),
            ("-x:/b", "neither an absolute path nor a volume name"),
        ] {
            let e = volume(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("src:dst"), "{e}");
        }
    }

    #[test]
    fn env_names() {
        for ok in ["DEST_DISK", "_x", "a.b-c", "-x", "IMG_URL2"] {
            assert!(env_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1X", "A B", "A=B", "ÄB", "x$"] {
            assert!(env_name(bad).unwrap_err().contains("DEST_DISK"), "{bad}");
        }
    }

    #[test]
    fn urls() {
        let ex = "http://10.1.1.1:8080/vmlinuz";
        for ok in [
            "http://10.1.1.1:8080/vmlinuz",
            "https://boot.example.com/initramfs?x=1",
        ] {
            assert!(http_url(ok, ex).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("ftp://x/vmlinuz", "scheme \"ftp\""),
            ("/vmlinuz", "not a URL"),
            ("10.1.1.1/vmlinuz", "not a URL"),
            ("http://a b/", "whitespace"),
            ("file:///vmlinuz", "scheme \"file\""),
        ] {
            let e = http_url(bad, ex).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains(ex), "{e}");
        }
    }
}
