//! The smallest end-to-end run of the whole router: supervisor, proxy and the fake backend,
//! through [`strata_e2e::stack::Stack`] and the [`strata_e2e::http`] client.

use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, model_ids};
use strata_protocol::api::ListObject;

const A: &str = "flash-a";

#[test]
fn models_listing_and_one_chat_completion_in_each_mode() {
    for wait_first in [false, true] {
        let config = ConfigBuilder::new("smoke")
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);

        let models = stack.models();
        assert_eq!(models.object, ListObject::List);
        assert_eq!(model_ids(&models), [A]);

        let response = stack.chat(&chat_body(A, false));
        response.expect_status(200);
        assert_eq!(response.header("x-strata-concrete-model"), Some(A));
        assert!(response.header("x-strata-request-id").is_some());
        let doc = response.json();
        assert_eq!(doc["object"], "chat.completion");
        assert_eq!(
            doc["choices"][0]["message"]["content"],
            "tok tok tok tok tok "
        );

        let mut stream = stack.open_chat(&chat_body(A, true));
        assert_eq!(stream.status, 200);
        let frames = stream.remaining_frames(DEADLINE);
        assert!(
            frames.last().is_some_and(http::Frame::is_done),
            "{frames:#?}"
        );
        let content: String = frames
            .iter()
            .filter(|frame| frame.is_data())
            .filter_map(|frame| {
                frame.json()["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(content, "tok tok tok tok tok ");

        assert_eq!(stack.status().loaded.as_deref(), Some(A));
        assert_eq!(stack.fake_log().start_count(&stack.config().upstream(A)), 1);
        stack.stop();
    }
}
