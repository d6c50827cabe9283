//! The dashboard's two assets, built into the binary (`assets/`): a style sheet and one small
//! script (refresh, sort, filter, the changes). Nothing is loaded from another host, and the
//! pages work without the script.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The style sheet.
pub const STYLE: &str = include_str!("assets/style.css");

/// The script.
pub const SCRIPT: &str = include_str!("assets/app.js");

/// The bytes the dashboard adds to the binary at most: its assets stay small.
pub const BUDGET: usize = 200 * 1024;

/// `GET /assets/<file>`: the assets, cached by browsers for an hour.
pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assets_stay_within_their_budget_and_name_no_other_host() {
        assert!(STYLE.len() + SCRIPT.len() < BUDGET);
        for asset in [STYLE, SCRIPT] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
            assert!(!asset.contains("@import") && !asset.contains("url("));
        }
    }
}
