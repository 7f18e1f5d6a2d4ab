// A JDBC client of a Silt server, as a BI tool is: Apache Arrow's Flight SQL
// JDBC driver and nothing of Silt's. Run by the Rust test `jdbc` (tests/it/jdbc.rs),
// which starts the server, compares what this prints with DataFusion's answers,
// and fetches the driver with scripts/jdbc-driver.sh.
//
// Usage: java -cp DRIVER_JAR:CLASSES SiltJdbc JDBC_URL COMMAND...
//   metadata                     what DatabaseMetaData lists
//   query:NAME:SQL_FILE          a Statement's result
//   prepared:NAME:SQL_FILE:PARAMS_FILE
//                                a PreparedStatement's result; PARAMS_FILE has one
//                                parameter a line, TYPE:VALUE (string, int, decimal, date);
//                                a line "--" executes and starts the next set of values
// Each command prints one JSON object on a line of its own; a failing command
// prints {"name": ..., "error": ...} and the others still run.

import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class SiltJdbc {
    public static void main(String[] args) throws Exception {
        Connection conn = DriverManager.getConnection(args[0]);
        try {
            for (int i = 1; i < args.length; i++) {
                String[] cmd = args[i].split(":", 4);
                String name = cmd.length > 1 ? cmd[1] : cmd[0];
                try {
                    switch (cmd[0]) {
                        case "metadata" -> System.out.println(metadata(conn.getMetaData()));
                        case "query" -> System.out.println(query(conn, name, Files.readString(Path.of(cmd[2]))));
                        case "prepared" -> prepared(conn, name, Files.readString(Path.of(cmd[2])),
                                Files.readAllLines(Path.of(cmd[3])));
                        default -> throw new IllegalArgumentException("unknown command " + cmd[0]);
                    }
                } catch (Exception e) {
                    System.out.println("{\"name\":" + quote(name) + ",\"error\":" + quote(e.toString()) + "}");
                }
                System.out.flush();
            }
        } finally {
            try {
                conn.close();
            } catch (Exception e) {
                // Reported, not thrown: the driver's own bookkeeping (see close_error in jdbc.rs).
                System.out.println("{\"name\":\"close\",\"error\":" + quote(e.getMessage()) + "}");
            }
        }
    }

    static String query(Connection conn, String name, String sql) throws Exception {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            return result(name, rs, "");
        }
    }

    static void prepared(Connection conn, String name, String sql, List<String> lines) throws Exception {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            int declared = ps.getParameterMetaData().getParameterCount();
            int index = 1;
            int run = 0;
            List<String> sets = new ArrayList<>(lines);
            sets.add("--");
            for (String line : sets) {
                if (line.equals("--")) {
                    try (ResultSet rs = ps.executeQuery()) {
                        System.out.println(result(name + "#" + run, rs, ",\"parameters\":" + declared));
                    }
                    run++;
                    index = 1;
                    continue;
                }
                String[] tv = line.split(":", 2);
                switch (tv[0]) {
                    case "string" -> ps.setString(index, tv[1]);
                    case "int" -> ps.setInt(index, Integer.parseInt(tv[1]));
                    case "decimal" -> ps.setBigDecimal(index, new BigDecimal(tv[1]));
                    case "date" -> ps.setDate(index, java.sql.Date.valueOf(tv[1]));
                    default -> throw new IllegalArgumentException("unknown parameter type " + tv[0]);
                }
                index++;
            }
        }
    }

    /** A result set as {"name", "columns", "types", "rows"}, every value as getString gives it. */
    static String result(String name, ResultSet rs, String extra) throws Exception {
        ResultSetMetaData md = rs.getMetaData();
        int n = md.getColumnCount();
        List<String> columns = new ArrayList<>();
        List<String> types = new ArrayList<>();
        for (int c = 1; c <= n; c++) {
            columns.add(quote(md.getColumnLabel(c)));
            types.add(quote(md.getColumnTypeName(c)));
        }
        StringBuilder rows = new StringBuilder();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            for (int c = 1; c <= n; c++) {
                row.add(quote(text(rs, md, c)));
            }
            if (rows.length() > 0) rows.append(',');
            rows.append('[').append(String.join(",", row)).append(']');
        }
        return "{\"name\":" + quote(name) + ",\"columns\":[" + String.join(",", columns) + "],\"types\":["
                + String.join(",", types) + "],\"rows\":[" + rows + "]" + extra + "}";
    }

    /** A value as text: getString, but decimals in plain notation (0.00, not 0E-2). */
    static String text(ResultSet rs, ResultSetMetaData md, int c) throws Exception {
        int type = md.getColumnType(c);
        if (type == java.sql.Types.DECIMAL || type == java.sql.Types.NUMERIC) {
            BigDecimal d = rs.getBigDecimal(c);
            return d == null ? null : d.toPlainString();
        }
        return rs.getString(c);
    }

    static String metadata(DatabaseMetaData md) throws Exception {
        StringBuilder out = new StringBuilder("{\"name\":\"metadata\"");
        out.append(",\"catalogs\":").append(column(md.getCatalogs(), "TABLE_CAT"));
        out.append(",\"schemas\":").append(column(md.getSchemas(), "TABLE_SCHEM"));
        out.append(",\"tables\":").append(column(md.getTables(null, null, "%", null), "TABLE_NAME"));
        out.append(",\"views\":").append(column(md.getTables(null, null, "%", new String[] {"VIEW"}), "TABLE_NAME"));
        out.append(",\"table_types\":").append(column(md.getTableTypes(), "TABLE_TYPE"));
        out.append(",\"lineitem_columns\":").append(column(md.getColumns(null, null, "lineitem", "%"), "COLUMN_NAME"));
        out.append(",\"lineitem_column_types\":").append(column(md.getColumns(null, null, "lineitem", "%"), "TYPE_NAME"));
        out.append(",\"primary_keys\":").append(column(md.getPrimaryKeys(null, null, "lineitem"), "COLUMN_NAME"));
        out.append(",\"imported_keys\":").append(column(md.getImportedKeys(null, null, "lineitem"), "FKCOLUMN_NAME"));
        out.append(",\"exported_keys\":").append(column(md.getExportedKeys(null, null, "orders"), "FKCOLUMN_NAME"));
        out.append(",\"cross_reference\":")
                .append(column(md.getCrossReference(null, null, "orders", null, null, "lineitem"), "FKCOLUMN_NAME"));
        out.append(",\"product\":").append(quote(md.getDatabaseProductName()));
        return out.append('}').toString();
    }

    /** One column of a metadata result set, as a JSON array. */
    static String column(ResultSet rs, String label) throws Exception {
        List<String> values = new ArrayList<>();
        try (rs) {
            while (rs.next()) {
                values.add(quote(rs.getString(label)));
            }
        }
        return "[" + String.join(",", values) + "]";
    }

    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
                    else b.append(ch);
                }
            }
        }
        return b.append('"').toString();
    }
}
