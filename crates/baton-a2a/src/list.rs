//! `ListTasks`: the tasks a caller started here, newest first, filtered
//! by context and state, a page at a time.

use a2a::{JsonRpcError, ListTasksRequest, ListTasksResponse, Task, TaskState, error_code};
use baton_gateway::callers::Caller;

use crate::Gateway;
use crate::ops::{error, internal};
use crate::task;

impl Gateway {
    /// `ListTasks`: the tasks this gateway started, newest first, filtered
    /// by context and state, a page at a time.
    pub(crate) async fn list(
        &self,
        request: &ListTasksRequest,
        caller: &Caller,
    ) -> Result<ListTasksResponse, JsonRpcError> {
        let size = usize::try_from(request.page_size.unwrap_or(50).clamp(1, 100)).unwrap_or(50);
        let offset: usize = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => token
                .parse()
                .map_err(|_| error(error_code::INVALID_PARAMS, "invalid page token"))?,
            None => 0,
        };
        let with_history = request.history_length.is_some_and(|n| n > 0);
        let mut records = self.index.all().await.map_err(internal)?;
        records.retain(|(_, record)| caller.owns(record.caller.as_deref()));
        if let Some(context) = &request.context_id {
            records.retain(|(_, record)| record.context == *context);
        }
        let wanted = request
            .status
            .clone()
            .filter(|s| *s != TaskState::Unspecified);
        if wanted.is_none() {
            // No state to filter on: only the page's tasks are read.
            let total = records.len();
            let mut page = Vec::new();
            for (session, record) in records.into_iter().skip(offset).take(size) {
                let (last, _) = self.last(session).await?;
                page.push(
                    self.task(session, &record.context, last.as_ref(), with_history)
                        .await,
                );
            }
            return Ok(page_of(page, offset, total));
        }
        let mut tasks = Vec::new();
        for (session, record) in records {
            let (last, _) = self.last(session).await?;
            if Some(task::state(last.as_ref())) == wanted {
                tasks.push(
                    self.task(session, &record.context, last.as_ref(), with_history)
                        .await,
                );
            }
        }
        let total = tasks.len();
        let page = tasks.into_iter().skip(offset).take(size).collect();
        Ok(page_of(page, offset, total))
    }
}

/// A page of `total` tasks that starts at `offset`.
fn page_of(page: Vec<Task>, offset: usize, total: usize) -> ListTasksResponse {
    let next = offset + page.len();
    ListTasksResponse {
        next_page_token: if next < total {
            next.to_string()
        } else {
            String::new()
        },
        page_size: i32::try_from(page.len()).unwrap_or(i32::MAX),
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
        tasks: page,
    }
}
