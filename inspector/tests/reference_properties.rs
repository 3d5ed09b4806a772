//! Property tests for image references, which any tenant writes into a pod spec: any
//! string is parsed or refused without panicking, and well-formed references keep their
//! registry, repository, tag and digest.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_inspector::{ImageRef, InspectError};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_string_is_parsed_or_refused(image in ".{0,80}") {
        match ImageRef::parse(&image) {
            Ok(reference) => prop_assert!(!reference.repository().is_empty()),
            Err(error) => prop_assert!(matches!(error, InspectError::InvalidReference { .. }), "{}", error),
        }
    }

    #[test]
    fn reference_shaped_strings_never_panic(
        parts in proptest::collection::vec("[a-zA-Z0-9._:@/-]{0,12}", 1..5),
    ) {
        let _ = ImageRef::parse(&parts.concat());
    }

    #[test]
    fn well_formed_references_keep_their_parts(
        host in "[a-z][a-z0-9]{0,8}\\.(io|com|example)",
        port in proptest::option::of(1u16..65535),
        path in proptest::collection::vec("[a-z0-9]{1,6}", 1..4),
        tag in proptest::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
        digest in proptest::option::of("[0-9a-f]{64}"),
    ) {
        let registry = match port {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let repository = path.join("/");
        let mut image = format!("{registry}/{repository}");
        if let Some(tag) = &tag {
            image.push(':');
            image.push_str(tag);
        }
        if let Some(digest) = &digest {
            image.push_str("@sha256:");
            image.push_str(digest);
        }
        let reference = ImageRef::parse(&image).unwrap();
        prop_assert_eq!(reference.registry(), registry.as_str());
        prop_assert_eq!(reference.repository(), repository.as_str());
        prop_assert_eq!(reference.is_digest(), digest.is_some());
        match (&tag, &digest) {
            (Some(tag), _) => prop_assert_eq!(reference.reference().tag(), Some(tag.as_str())),
            (None, None) => prop_assert_eq!(reference.reference().tag(), Some("latest")),
            (None, Some(_)) => {}
        }
    }
}
