//! Chat commands (DESIGN.md §9), recognised the same way on every platform: `/name args` or
//! `/name@botname args`. Only the listed names are commands; any other `/word`, and paths like
//! `/tmp/x`, are ordinary text for the model.

/// A recognised command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/new [title]`
    New(Option<String>),
    /// `/reset`
    Reset,
    /// `/resume [id|title|N]`
    Resume(Option<String>),
    /// `/sessions`
    Sessions,
    /// `/branch [title]`
    Branch(Option<String>),
    /// `/compress [focus]`
    Compress(Option<String>),
    /// `/title [text]`
    Title(Option<String>),
    /// `/search <query>`
    Search(Option<String>),
    Status,
    Usage,
    /// `/model [name]`
    Model(Option<String>),
    Stop,
    Retry,
    Undo,
    Help,
}

/// Every command with its one-line help, in the order `/help` lists them.
pub const HELP: &[(&str, &str)] = &[
    ("/new [title]", "start a fresh session"),
    ("/reset", "the same as /new"),
    (
        "/resume [id|title|N]",
        "list recent sessions, or go back to one",
    ),
    ("/sessions", "list this conversation's recent sessions"),
    (
        "/branch [title]",
        "copy this session into a new one and continue there",
    ),
    ("/compress [focus]", "summarise the earlier context now"),
    ("/title [text]", "show or set this session's title"),
    ("/search <query>", "search this conversation's messages"),
    (
        "/status",
        "session, model, context size, compressions, tokens and cost",
    ),
    ("/usage", "tokens and cost of this session"),
    (
        "/model [name]",
        "show or change the model for this conversation",
    ),
    ("/stop", "stop the running turn"),
    ("/retry", "answer the last message again"),
    ("/undo", "forget the last exchange"),
    ("/help", "this list"),
];

impl Command {
    /// Commands that act at once even while a turn runs (the rest wait or are refused).
    pub fn acts_mid_turn(&self) -> bool {
        matches!(
            self,
            Self::Stop | Self::Status | Self::New(_) | Self::Reset | Self::Help
        )
    }
}

/// Parses `text` as a command addressed to this bot (`bot` is its username, without `@`; a
/// command addressed to another bot is not ours and stays text).
pub fn parse(text: &str, bot: Option<&str>) -> Option<Command> {
    let text = text.trim();
    let rest = text.strip_prefix('/')?;
    let (word, args) = match rest.find(char::is_whitespace) {
        Some(at) => (&rest[..at], rest[at..].trim()),
        None => (rest, ""),
    };
    let (name, addressee) = match word.split_once('@') {
        Some((name, to)) => (name, Some(to)),
        None => (word, None),
    };
    if let (Some(to), Some(bot)) = (addressee, bot)
        && !to.eq_ignore_ascii_case(bot)
    {
        return None;
    }
    let arg = (!args.is_empty()).then(|| args.to_owned());
    Some(match name.to_ascii_lowercase().as_str() {
        "new" => Command::New(arg),
        "reset" => Command::Reset,
        "resume" => Command::Resume(arg),
        "sessions" => Command::Sessions,
        "branch" => Command::Branch(arg),
        "compress" => Command::Compress(arg),
        "title" => Command::Title(arg),
        "search" => Command::Search(arg),
        "status" => Command::Status,
        "usage" => Command::Usage,
        "model" => Command::Model(arg),
        "stop" => Command::Stop,
        "retry" => Command::Retry,
        "undo" => Command::Undo,
        "help" | "start" => Command::Help,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_with_and_without_arguments_and_bot_names() {
        assert_eq!(parse("/new", None), Some(Command::New(None)));
        assert_eq!(
            parse("  /new  Trip to Oslo ", None),
            Some(Command::New(Some("Trip to Oslo".into())))
        );
        assert_eq!(parse("/STATUS", None), Some(Command::Status));
        assert_eq!(
            parse("/status@iris_bot", Some("iris_bot")),
            Some(Command::Status)
        );
        assert_eq!(
            parse("/status@Iris_Bot", Some("iris_bot")),
            Some(Command::Status)
        );
        assert_eq!(
            parse("/status@other_bot", Some("iris_bot")),
            None,
            "for another bot"
        );
        assert_eq!(
            parse("/resume 2", None),
            Some(Command::Resume(Some("2".into())))
        );
        assert_eq!(
            parse("/search café menu", None),
            Some(Command::Search(Some("café menu".into())))
        );
        assert_eq!(
            parse("/compress\nthe budget", None),
            Some(Command::Compress(Some("the budget".into())))
        );
    }

    #[test]
    fn other_slashes_are_text() {
        for text in [
            "/tmp/x",
            "/etc/passwd is a file",
            "/unknown",
            "/ new",
            "hello /new",
            "//new",
            "/",
        ] {
            assert_eq!(parse(text, None), None, "{text:?}");
        }
    }

    #[test]
    fn which_commands_act_mid_turn() {
        let immediate: Vec<&str> = [
            "/stop",
            "/status",
            "/new",
            "/reset",
            "/help",
            "/undo",
            "/retry",
            "/compress",
            "/title x",
        ]
        .into_iter()
        .filter(|t| parse(t, None).is_some_and(|c| c.acts_mid_turn()))
        .collect();
        assert_eq!(immediate, ["/stop", "/status", "/new", "/reset", "/help"]);
        assert_eq!(HELP.len(), 15);
    }
}
