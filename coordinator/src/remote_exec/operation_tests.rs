use super::*;
use crate::layers::reapi::proto::google::rpc;

fn any<M: Message>(type_name: &str, m: &M) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: m.encode_to_vec(),
    }
}

fn op(
    name: &str,
    done: bool,
    result: Option<longrunning::operation::Result>,
) -> longrunning::Operation {
    let meta = re::ExecuteOperationMetadata {
        stage: re::execution_stage::Value::Executing as i32,
        action_digest: None,
    };
    longrunning::Operation {
        name: name.to_owned(),
        metadata: Some(any("build.bazel.remote.execution.v2.ExecuteOperationMetadata", &meta)),
        done,
        result,
    }
}

fn response(status: i32, result: Option<re::ActionResult>) -> longrunning::operation::Result {
    let r = re::ExecuteResponse {
        result,
        cached_result: false,
        status: Some(rpc::Status { code: status, message: "m".into() }),
        message: String::new(),
    };
    longrunning::operation::Result::Response(any(
        "build.bazel.remote.execution.v2.ExecuteResponse",
        &r,
    ))
}

#[test]
fn progress_done_and_failures_are_told_apart() {
    assert_eq!(
        read(&op("o", false, None)),
        Step::Progress(Some(re::execution_stage::Value::Executing))
    );
    let done = read(&op("o", true, Some(response(0, Some(re::ActionResult::default())))));
    assert!(matches!(done, Step::Done(_)));
    let missing = read(&op("o", true, Some(response(Code::FailedPrecondition as i32, None))));
    assert!(matches!(missing, Step::MissingBlobs(_)));
    let failed = read(&op("o", true, Some(response(Code::Internal as i32, None))));
    assert!(matches!(failed, Step::Failed(_)));
    let err = longrunning::operation::Result::Error(rpc::Status { code: 13, message: "x".into() });
    assert!(matches!(read(&op("o", true, Some(err))), Step::Failed(_)));
    assert!(matches!(read(&op("o", true, None)), Step::Failed(_)));
    assert!(matches!(read(&op("o", true, Some(response(0, None)))), Step::Failed(_)), "no result");
}

#[test]
fn a_dropped_stream_waits_on_the_named_operation() {
    let mut f = Follow::default();
    assert_eq!(
        f.after(Ended::Error(Code::Unavailable, "down".into())),
        Next::Execute,
        "no name yet"
    );
    f.message(&op("ops/1", false, None));
    assert_eq!(f.after(Ended::Closed), Next::Wait("ops/1".into()));
    assert_eq!(f.after(Ended::Error(Code::Unavailable, "x".into())), Next::Wait("ops/1".into()));
    assert_eq!(f.after(Ended::Error(Code::NotFound, "gone".into())), Next::Execute);
}

#[test]
fn failures_in_a_row_are_bounded_and_a_message_resets_them() {
    let mut f = Follow::default();
    f.message(&op("ops/1", false, None));
    for _ in 0..MAX_RECONNECTS {
        assert!(matches!(f.after(Ended::Closed), Next::Wait(_)));
    }
    f.message(&op("ops/1", false, None));
    for _ in 0..MAX_RECONNECTS {
        assert!(matches!(f.after(Ended::Closed), Next::Wait(_)));
    }
    assert!(matches!(f.after(Ended::Closed), Next::GiveUp(_)));
}

#[test]
fn missing_blobs_are_reuploaded_a_bounded_number_of_times() {
    let mut f = Follow::default();
    f.message(&op("ops/1", false, None));
    for _ in 0..MAX_REUPLOADS {
        assert_eq!(f.after(Ended::MissingBlobs("m".into())), Next::Reupload);
        assert_eq!(f.name, None, "the next Execute starts a new operation");
    }
    assert!(matches!(f.after(Ended::Error(Code::FailedPrecondition, "m".into())), Next::GiveUp(_)));
}

#[test]
fn errors_a_retry_cannot_fix_give_up_at_once() {
    for code in
        [Code::InvalidArgument, Code::PermissionDenied, Code::Unauthenticated, Code::Unimplemented]
    {
        assert!(matches!(Follow::default().after(Ended::Error(code, "x".into())), Next::GiveUp(_)));
    }
}

#[test]
fn backoff_grows_and_is_bounded() {
    assert_eq!(backoff(1).as_millis(), 100);
    assert_eq!(backoff(2).as_millis(), 200);
    assert_eq!(backoff(30).as_millis(), 3200);
}
